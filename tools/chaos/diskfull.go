package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"usher/internal/event"
)

// natsStoreSize is the size of each NATS node's store when the stores
// are tmpfs mounts (plan.natsTmpfs): room for a run's streams many times
// over, and little enough to fill in a moment.
const natsStoreSize = "128m"

// mountStore makes a NATS node's store a tmpfs of its own (root only), so
// a scenario can fill it; unmountStores undoes it at the stack's close.
func (s *stack) mountStore(dir string) error {
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+natsStoreSize, "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount a tmpfs as %s (needs root): %v: %s", dir, err, out)
	}
	s.mu.Lock()
	s.mounts = append(s.mounts, dir)
	s.mu.Unlock()
	return nil
}

func (s *stack) unmountStores() {
	s.mu.Lock()
	mounts := s.mounts
	s.mounts = nil
	s.mu.Unlock()
	for _, dir := range mounts {
		_ = exec.Command("umount", "-l", dir).Run()
	}
}

// fillDisk writes zeros into path until the file system holds no more.
func fillDisk(path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// jetstreamDiskFull fills the store of the node leading USHER_ENTRIES
// while it leads, keeps it full for the outage's length, frees it and
// waits until every replica is current again. A node whose store fills
// turns its JetStream off and does not turn it on again by itself: if
// the replicas are not current within a while of the space coming back,
// the node is restarted, as its operator would, and the journal says so.
func jetstreamDiskFull(ctx context.Context, f *fault) error {
	n, err := f.s.streamLeader(ctx, event.StreamEntries)
	if err != nil {
		return err
	}
	filler := filepath.Join(f.s.dir, "nats", n.name, "fill")
	wrote, err := fillDisk(filler)
	if err != nil {
		return err
	}
	f.injected("filled the store of NATS node %s, leader of USHER_ENTRIES (%d MB written until ENOSPC)", n.name, wrote>>20)
	slept := sleepCtx(ctx, f.t.outage)
	if err := os.Remove(filler); err != nil {
		return err
	}
	f.healed("store of NATS node %s freed", n.name)
	if !slept {
		return ctx.Err()
	}
	if err := f.s.streamCurrent(ctx, event.StreamEntries, 15*time.Second); err == nil {
		return nil
	}
	f.j.add(record{Kind: recFault, Detail: fmt.Sprintf("USHER_ENTRIES replicas not current 15 s after the space came back: restarting NATS node %s (SIGTERM)", n.name)})
	if err := n.proc.terminate(syscall.SIGTERM, 10*time.Second); err != nil {
		return err
	}
	if err := n.proc.start(); err != nil {
		return err
	}
	return f.s.streamCurrent(ctx, event.StreamEntries, 60*time.Second)
}
