package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// anchorServerArg, as the only argument, makes the load tool the anchor's
// server (see sseAnchor).
const anchorServerArg = "anchor-sse-server"

// sseAnchor is the drop's anchor for the told latency: a bare net/http
// Server-Sent Events server in a process of its own (the load tool run
// again as anchorServerArg) holds n streams, opened by the same client code
// the drop's shoppers use; one message to that process makes it write one
// event to all of them at once (every handler waits on one channel, as the
// notifier's streams wait on their client's signal). It returns each
// stream's delay from that message to the event read: what telling n open
// streams one thing costs on this machine at this moment, with nothing to
// find out first.
func sseAnchor(ctx context.Context, n int, timeout time.Duration) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	srv, err := startAnchorServer(ctx)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	base := srv.base

	got := make([]time.Time, n)
	connected, wait := openAnchorStreams(ctx, base, n, func(i int, body io.Reader) {
		_ = readEvents(body, func(event, _ string) bool {
			if event == "closed" {
				got[i] = time.Now()
				return false
			}
			return true
		})
	})
	if connected == 0 {
		cancel()
		wait()
		return nil, fmt.Errorf("anchor: no stream connected")
	}
	time.Sleep(200 * time.Millisecond) // let the last handlers reach their wait
	t0 := time.Now()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/broadcast", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		wait()
		return nil, fmt.Errorf("anchor broadcast: %w", err)
	}
	res.Body.Close()
	wait()
	var out []time.Duration
	for _, t := range got {
		if !t.IsZero() {
			out = append(out, t.Sub(t0))
		}
	}
	if len(out) < int(connected) {
		return out, fmt.Errorf("anchor: %d of %d streams got the event", len(out), connected)
	}
	return out, nil
}

// anchorProcess is a running anchor server (see anchorServer).
type anchorProcess struct {
	base string // http://host:port
	pid  int
	stop func()
}

// startAnchorServer runs the load tool again as anchorServerArg and waits
// for its address; stop ends it (closing its standard input).
func startAnchorServer(ctx context.Context) (anchorProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return anchorProcess{}, err
	}
	cmd := exec.CommandContext(ctx, self, anchorServerArg)
	stdin, err := cmd.StdinPipe() // the server ends when it closes
	if err != nil {
		return anchorProcess{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return anchorProcess{}, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return anchorProcess{}, err
	}
	stop := func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		stop()
		return anchorProcess{}, fmt.Errorf("anchor server: %q %v", line, err)
	}
	return anchorProcess{base: "http://" + addr, pid: cmd.Process.Pid, stop: stop}, nil
}

// sseAnchorMemory is the SSE memory anchor: a bare net/http Server-Sent
// Events server (anchorServer, in a process of its own) holding n idle
// streams opened by the same client code as the sse scenario's. It returns
// the server's resident memory per stream (KiB): RSS with every stream open
// minus RSS before the first, over the streams connected — measured as the
// sse scenario measures the notifier's.
func sseAnchorMemory(ctx context.Context, n int, timeout time.Duration) (kib float64, connected int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	srv, err := startAnchorServer(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer srv.stop()
	before, err := rssKiB(srv.pid)
	if err != nil {
		return 0, 0, err
	}
	sctx, stopStreams := context.WithCancel(ctx)
	ok, wait := openAnchorStreams(sctx, srv.base, n, func(_ int, body io.Reader) {
		_, _ = io.Copy(io.Discard, body) // idle until the end
	})
	time.Sleep(500 * time.Millisecond) // let the last handlers reach their wait
	after, rerr := rssKiB(srv.pid)
	stopStreams()
	wait()
	if rerr != nil {
		return 0, ok, rerr
	}
	if ok == 0 {
		return 0, 0, fmt.Errorf("anchor: no stream connected")
	}
	return (after - before) / float64(ok), ok, nil
}

// openAnchorStreams opens n streams to the anchor server at base, 256
// connecting at a time (the sse scenario's pace), each from one of eight
// loopback source addresses (tens of thousands of streams would run one
// address out of ports), and hands each open stream's body to read on a
// goroutine of its own. It returns once every stream is open or has failed
// (or ctx ended): how many are open, and a wait for the readers, which end
// with their streams.
func openAnchorStreams(ctx context.Context, base string, n int, read func(i int, body io.Reader)) (connected int64, wait func()) {
	var open, settled atomic.Int64
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			once := sync.OnceFunc(func() { <-sem; settled.Add(1) })
			defer once()
			local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}
			tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}).DialContext, DisableCompression: true}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/events", nil)
			res, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				return
			}
			defer res.Body.Close()
			if res.StatusCode != 200 {
				return
			}
			open.Add(1)
			once()
			read(i, res.Body)
		}()
	}
	for settled.Load() < int64(n) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	return open.Load(), wg.Wait
}

// rssKiB reads a process's resident set size from /proc.
func rssKiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb float64
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%f kB", &kb)
			return kb, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// anchorServer is the anchor's server: it prints "listening <addr>", holds
// every stream opened on /events until a POST /broadcast, then writes one
// event to each; it ends when its standard input does.
func anchorServer(stdin io.Reader, stdout io.Writer) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "anchor server:", err)
		return 1
	}
	release := make(chan struct{})
	broadcast := sync.OnceFunc(func() { close(release) })
	mux := http.NewServeMux()
	mux.HandleFunc("POST /broadcast", func(w http.ResponseWriter, r *http.Request) {
		broadcast()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		rc := http.NewResponseController(w)
		if _, err := io.WriteString(w, "retry: 2000\n\n"); err != nil || rc.Flush() != nil {
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(w, "id: 1\nevent: closed\ndata: {\"reason\":\"sold_out\"}\n\n"); err == nil {
			_ = rc.Flush()
		}
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())
	_, _ = io.Copy(io.Discard, stdin)
	_ = srv.Close()
	return 0
}

// anchorCap is the most streams the anchor can hold: one descriptor each
// in this process (and in the server's), under the open-file limit.
func anchorCap() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < 1024 {
		return 256
	}
	return int(min(rl.Cur-512, 1<<20))
}
