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
	stalls := s.stalls
	s.stalls = nil
	s.mu.Unlock()
	for _, dir := range mounts {
		_ = exec.Command("umount", "-l", dir).Run()
	}
	for _, st := range stalls {
		st.unmount()
	}
}

// mountStall serves a NATS node's store through a stalling file system
// over a folder beside it (store + ".disk"), so a scenario can hold its
// writes; unmountStores undoes it at the stack's close.
func (s *stack) mountStall(n *natsNode, store string) error {
	backing := store + ".disk"
	if err := os.MkdirAll(backing, 0o755); err != nil {
		return err
	}
	st, err := mountStall(backing, store)
	if err != nil {
		return err
	}
	n.stall = st
	s.mu.Lock()
	s.stalls = append(s.stalls, st)
	s.mu.Unlock()
	return nil
}

// resumeStores lets every stalled store's writes through.
func (s *stack) resumeStores() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.stalls {
		st.resume()
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
	return restartIfBehind(ctx, f, n, "the space came back")
}

// restartIfBehind waits up to 15 s for every replica of USHER_ENTRIES to
// be current after a node's store came back; if they are not, it
// restarts the node, as its operator would, journals that, and waits for
// them again.
func restartIfBehind(ctx context.Context, f *fault, n *natsNode, after string) error {
	if err := f.s.streamCurrent(ctx, event.StreamEntries, 15*time.Second); err == nil {
		return nil
	}
	f.j.add(record{Kind: recFault, Detail: fmt.Sprintf("USHER_ENTRIES replicas not current 15 s after %s: restarting NATS node %s (SIGTERM)", after, n.name)})
	if err := n.proc.terminate(syscall.SIGTERM, 10*time.Second); err != nil {
		return err
	}
	if err := n.proc.start(); err != nil {
		return err
	}
	return f.s.streamCurrent(ctx, event.StreamEntries, 60*time.Second)
}

// jetstreamDiskStall holds every write, flush and fsync on the store of
// the NATS node leading USHER_ENTRIES for the outage's length, as a
// failing disk does (reads go on), journaling who leads the stream
// meanwhile; then lets the writes through and waits until every replica
// is current, restarting the node if it does not catch up by itself.
func jetstreamDiskStall(ctx context.Context, f *fault) error {
	n, err := f.s.streamLeader(ctx, event.StreamEntries)
	if err != nil {
		return err
	}
	if n.stall == nil {
		return fmt.Errorf("the store of NATS node %s is not a stalling mount", n.name)
	}
	n.stall.stall()
	f.injected("stalled the store of NATS node %s, leader of USHER_ENTRIES: its writes, flushes and fsyncs wait", n.name)
	slept := watchLeader(ctx, f, n.name, f.t.outage)
	n.stall.resume()
	f.healed("store of NATS node %s resumed: its held writes complete", n.name)
	if !slept {
		return ctx.Err()
	}
	return restartIfBehind(ctx, f, n, "the disk resumed")
}

// watchLeader asks every second for a while who leads USHER_ENTRIES and
// journals each change (and a stream that does not answer), so the
// journal shows what the cluster did about a stalled leader. It reports
// whether it watched the whole while.
func watchLeader(ctx context.Context, f *fault, leader string, d time.Duration) bool {
	start := time.Now()
	last := "led by " + leader
	for time.Since(start) < d {
		if !sleepCtx(ctx, min(time.Second, d-time.Since(start))) {
			return false
		}
		asked := time.Since(start)
		now := f.s.leaderNow(ctx, event.StreamEntries)
		if now != last {
			f.j.add(record{Kind: recFault, Detail: fmt.Sprintf("%.1f s into the stall, USHER_ENTRIES: %s", asked.Seconds(), now)})
			last = now
		}
	}
	return true
}

// leaderNow says in a few words who leads a stream, asking for at most a
// second: a leader whose disk holds its writes may not answer at all.
func (s *stack) leaderNow(ctx context.Context, stream string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		return noAnswer(err)
	}
	info := st.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "no leader"
	}
	return "led by " + info.Cluster.Leader
}

func noAnswer(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer within 1 s"
	}
	return "no answer: " + err.Error()
}
