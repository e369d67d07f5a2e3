package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// stallFSName is the source every stalling mount shows in mountinfo, so a
// later run can find the ones a crashed run left behind.
const stallFSName = "usher-chaos-stall"

// stallFS is a passthrough FUSE file system over a backing folder whose
// writes wait while it is stalled: a disk that stops completing writes
// (a failing drive, a saturated network volume) while reads, lookups and
// directory changes go on. Write, Fsync and Allocate on any file of the
// mount, and Flush (the close) of a file open for writing, block from
// stall until resume; closing a file opened only to read does not.
type stallFS struct {
	dir    string // the mount point
	server *fuse.Server
	gate   *gate
}

// mountStall serves backing at dir through a stalling file system
// (mount(2) itself, as root; fusermount only if that fails). A mount a
// crashed run left dead is detached first.
func mountStall(backing, dir string) (*stallFS, error) {
	sweepDeadStalls()
	node, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("stalling store over %s: %w", backing, err)
	}
	g := &gate{}
	rootData := node.(*fs.LoopbackNode).RootData
	rootData.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &stallNode{LoopbackNode: fs.LoopbackNode{RootData: r}, gate: g}
	}
	root := rootData.NewNode(rootData, nil, "", nil)
	rootData.RootNode = root
	server, err := fs.Mount(dir, root, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMount: true,
		FsName:      stallFSName,
		Name:        "stall",
	}})
	if err != nil {
		return nil, fmt.Errorf("mount a stalling store at %s (needs root and /dev/fuse): %w", dir, err)
	}
	return &stallFS{dir: dir, server: server, gate: g}, nil
}

// stall makes every write on the mount wait until resume.
func (s *stallFS) stall() { s.gate.close() }

// resume lets every waiting write through, and the ones after.
func (s *stallFS) resume() { s.gate.open() }

// unmount resumes and unmounts; a mount still busy (a process that
// outlived its kill) is detached lazily, to go when its last user does.
func (s *stallFS) unmount() {
	s.resume()
	if err := s.server.Unmount(); err != nil {
		_ = syscall.Unmount(s.dir, syscall.MNT_DETACH)
	}
}

// sweepDeadStalls detaches the stalling mounts whose server is gone (a
// run killed before its close): their mount point answers ENOTCONN, and
// would make removing the folder above it fail. A live mount, another
// run's, answers and is left alone.
func sweepDeadStalls() {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mount-id parent major:minor root mount-point options… - type source options
		before, after, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(before), strings.Fields(after)
		if !ok || len(fields) < 5 || len(tail) < 2 || tail[1] != stallFSName {
			continue
		}
		mp := strings.ReplaceAll(fields[4], `\040`, " ")
		if _, err := os.Stat(mp); errors.Is(err, syscall.ENOTCONN) {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
}

// gate is open, or closed until opened; a closed gate holds every waiter.
type gate struct {
	mu   sync.Mutex
	held chan struct{} // nil while open; closed when it opens
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		g.held = make(chan struct{})
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
}

// wait returns once the gate is open, or EINTR if the kernel interrupts
// the request (the writer got a signal).
func (g *gate) wait(ctx context.Context) syscall.Errno {
	g.mu.Lock()
	held := g.held
	g.mu.Unlock()
	if held == nil {
		return 0
	}
	select {
	case <-held:
		return 0
	case <-ctx.Done():
		return syscall.EINTR
	}
}

// stallNode is a loopback node whose open files are stallFiles.
type stallNode struct {
	fs.LoopbackNode
	gate *gate
}

var (
	_ fs.NodeOpener  = (*stallNode)(nil)
	_ fs.NodeCreater = (*stallNode)(nil)
)

func (n *stallNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	return n.wrap(fh, flags), fuseFlags, errno
}

func (n *stallNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	inode, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return inode, n.wrap(fh, flags), fuseFlags, errno
}

func (n *stallNode) wrap(fh fs.FileHandle, flags uint32) fs.FileHandle {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh
	}
	return &stallFile{LoopbackFile: lf, gate: n.gate, writable: flags&syscall.O_ACCMODE != syscall.O_RDONLY}
}

// stallFile is a loopback file whose writes pass the gate first.
type stallFile struct {
	*fs.LoopbackFile
	gate *gate
	// writable is a file opened for writing: its close may have written
	// data to flush, so it waits too.
	writable bool
}

var (
	_ fs.FileWriter          = (*stallFile)(nil)
	_ fs.FileWritever        = (*stallFile)(nil)
	_ fs.FileFlusher         = (*stallFile)(nil)
	_ fs.FileFsyncer         = (*stallFile)(nil)
	_ fs.FileAllocater       = (*stallFile)(nil)
	_ fs.FilePassthroughFder = (*stallFile)(nil)
)

// PassthroughFd declines: with FUSE passthrough the kernel would send
// reads and writes straight to the backing file, past the gate.
func (f *stallFile) PassthroughFd() (int, bool) { return -1, false }

func (f *stallFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := f.gate.wait(ctx); errno != 0 {
		return 0, errno
	}
	return f.LoopbackFile.Write(ctx, data, off)
}

func (f *stallFile) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	if errno := f.gate.wait(ctx); errno != 0 {
		return 0, errno
	}
	return f.LoopbackFile.Writev(ctx, data, off)
}

func (f *stallFile) Flush(ctx context.Context) syscall.Errno {
	if !f.writable {
		return f.LoopbackFile.Flush(ctx)
	}
	if errno := f.gate.wait(ctx); errno != 0 {
		return errno
	}
	return f.LoopbackFile.Flush(ctx)
}

func (f *stallFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := f.gate.wait(ctx); errno != 0 {
		return errno
	}
	return f.LoopbackFile.Fsync(ctx, flags)
}

func (f *stallFile) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if errno := f.gate.wait(ctx); errno != 0 {
		return errno
	}
	return f.LoopbackFile.Allocate(ctx, off, size, mode)
}
