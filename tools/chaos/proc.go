package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is one child process the harness owns. It runs in its own process
// group, so a signal reaches everything it forked (redis-server's AOF
// rewrite child, PostgreSQL's backends), and it is sent SIGKILL by the
// kernel if the harness itself dies (Pdeathsig), so no run leaves a server
// behind, not even one killed with kill -9.
type proc struct {
	name string
	path string
	args []string
	env  []string
	log  string              // file its stdout and stderr are appended to
	cred *syscall.Credential // run as this user (PostgreSQL refuses root)

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current incarnation exited
	stopped bool          // SIGSTOPped and not yet continued
}

// start runs the process (again, after it exited).
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "=== chaos: start %s at %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.cred}
	if p.cred != nil {
		cmd.Dir = "/"
	}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.stopped = cmd, done, false
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(done)
	}()
	return nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pid is the current incarnation's process id, 0 when not running.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

// running reports whether the process is alive (a stopped one is).
func (p *proc) running() bool { return p.pid() != 0 }

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return fmt.Errorf("%s is not running", p.name)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %s %v: %w", p.name, sig, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return nil
}

// wait waits until the current incarnation exited, or ctx ends.
func (p *proc) wait(ctx context.Context) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s did not exit: %w", p.name, ctx.Err())
	}
}

// kill is kill -9 of the whole group; it returns once the process is gone.
func (p *proc) kill() error {
	if !p.running() {
		return nil
	}
	if err := p.signal(syscall.SIGKILL); err != nil && p.running() {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.wait(ctx)
}

// terminate asks the process to stop (SIGTERM, or sig) and kills it when it
// has not within grace.
func (p *proc) terminate(sig syscall.Signal, grace time.Duration) error {
	if !p.running() {
		return nil
	}
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		_ = p.signal(syscall.SIGCONT)
	}
	if err := p.signal(sig); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := p.wait(ctx); err != nil {
		return errors.Join(err, p.kill())
	}
	return nil
}
