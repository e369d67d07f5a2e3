package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// mountTestStall mounts a stalling file system over a temp folder, or
// skips the test where FUSE cannot be mounted.
func mountTestStall(t *testing.T) (s *stallFS, backing, mnt string) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse (%v): a stalling store needs FUSE", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: the stalling store mounts with mount(2), as the chaos suite does")
	}
	backing, mnt = t.TempDir(), t.TempDir()
	s, err := mountStall(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.unmount)
	return s, backing, mnt
}

func TestAStalledStoreHoldsWritesUntilResumed(t *testing.T) {
	s, backing, mnt := mountTestStall(t)
	want := []byte("a block of a JetStream message file")
	s.stall()
	done := make(chan error, 1)
	go func() {
		f, err := os.Create(filepath.Join(mnt, "1.blk"))
		if err != nil {
			done <- err
			return
		}
		if _, err := f.Write(want); err != nil {
			f.Close()
			done <- err
			return
		}
		if err := f.Sync(); err != nil {
			f.Close()
			done <- err
			return
		}
		done <- f.Close()
	}()
	// While stalled the write must not complete. A short wait cannot
	// prove it never would, only that it did not yet.
	select {
	case err := <-done:
		t.Fatalf("write and fsync on a stalled store completed (err %v), want them held", err)
	case <-time.After(300 * time.Millisecond):
	}
	s.resume()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("write and fsync after resume: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("write and fsync still held 10 s after resume")
	}
	got, err := os.ReadFile(filepath.Join(backing, "1.blk"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("backing file holds %q, want %q", got, want)
	}
}

func TestAStalledStoreStillServesReads(t *testing.T) {
	s, backing, mnt := mountTestStall(t)
	want := []byte("written before the stall")
	if err := os.WriteFile(filepath.Join(backing, "old.blk"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	s.stall()
	defer s.resume()
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(mnt, "old.blk"))
		done <- read{b, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if !bytes.Equal(r.b, want) {
			t.Errorf("read through a stalled store = %q, want %q", r.b, want)
		}
	case <-time.After(10 * time.Second):
		s.resume()
		t.Fatal("reading a file on a stalled store still held after 10 s, want it served")
	}
}
