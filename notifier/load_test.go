package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"usher/internal/testenv"
)

// TestSSELoad measures one notifier process holding N idle streams: its
// memory per client (RSS and Go heap from its own /metrics) and the READY
// delivery latency when all N are admitted in one tick. It only runs when
// USHER_SSE_LOAD=N is set (see BENCHMARKS.md, "Push"); loopback only, and
// bounded to a few minutes.
func TestSSELoad(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("USHER_SSE_LOAD"))
	if n <= 0 {
		t.Skip("set USHER_SSE_LOAD=N to measure N idle streams")
	}
	w := newWorld(t)
	bin := filepath.Join(t.TempDir(), "notifier")
	// -trimpath as make test and the chaos suite build it, so a warm
	// cache only links (without: about 200 CPU-seconds on a cold one).
	if b, err := exec.Command("go", "build", "-trimpath", "-o", bin, "usher/notifier").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	port, _ := testenv.FreePort()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "USHER_NOTIFIER_ADDR="+addr, "USHER_LOG_LEVEL=warn")
	for k, v := range w.env {
		if k != "USHER_NOTIFIER_ADDR" && k != "USHER_NOTIFIER_POSITION_INTERVAL" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); http.DefaultClient.CloseIdleConnections() })
	nt := &notifier{addr: addr}
	testenv.Eventually(t, 20*time.Second, func() bool {
		res, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil
	}, "notifier not up")

	urls := make([]string, n)
	for i := range urls {
		urls[i] = nt.url(w.queue, w.join(uint64(i+1), fmt.Sprint("load-", i)))
	}
	rss0, heap0 := rssKB(t, cmd.Process.Pid), metric(t, addr, "go_memstats_heap_inuse_bytes")

	tr := &http.Transport{MaxIdleConnsPerHost: n}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var latencies []time.Duration
	var connected sync.WaitGroup
	var done sync.WaitGroup
	connected.Add(n)
	start := time.Now()
	for i := range urls {
		done.Add(1)
		go func() {
			defer done.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", urls[i], nil)
			res, err := hc.Do(req)
			if err != nil {
				connected.Done()
				t.Errorf("client %d: %v", i, err)
				return
			}
			defer res.Body.Close()
			p := newSSEParser(bufio.NewReader(res.Body))
			for first := true; ; first = false {
				ev, err := p.next()
				if err != nil {
					if first {
						connected.Done()
					}
					return
				}
				if first {
					connected.Done()
				}
				if ev.typ == "ready" {
					got := time.Now()
					r := decode[readyData](t, ev)
					mu.Lock()
					latencies = append(latencies, got.Sub(r.ReadyAt))
					mu.Unlock()
					return
				}
			}
		}()
	}
	connected.Wait()
	connectTime := time.Since(start)
	// Let the streams settle into idle, then read the process.
	testenv.Eventually(t, 30*time.Second, func() bool { return metric(t, addr, "usher_sse_connections") == float64(n) }, "not all connected")
	time.Sleep(3 * time.Second) // a fixed settle time before a measurement, not a synchronisation
	rss1, heap1, gor := rssKB(t, cmd.Process.Pid), metric(t, addr, "go_memstats_heap_inuse_bytes"), metric(t, addr, "go_goroutines")

	w.tick(n, 300*time.Second, 100*time.Millisecond)
	w.announce()
	done.Wait()
	slices.Sort(latencies)
	if len(latencies) != n {
		t.Fatalf("%d of %d clients got ready", len(latencies), n)
	}
	q := func(p float64) time.Duration { return latencies[min(int(p*float64(n)), n-1)] }
	t.Logf("clients=%d connect_all=%v", n, connectTime.Round(time.Millisecond))
	t.Logf("rss: %d KiB -> %d KiB = %.1f KiB/client", rss0, rss1, float64(rss1-rss0)/float64(n))
	t.Logf("go heap in use: %.1f MiB -> %.1f MiB = %.1f KiB/client; goroutines %v", heap0/(1<<20), heap1/(1<<20), (heap1-heap0)/1024/float64(n), gor)
	t.Logf("ready latency (receipt - readyAt, one tick of %d admissions): p50=%v p99=%v max=%v", n, q(.5).Round(time.Millisecond), q(.99).Round(time.Millisecond), latencies[n-1].Round(time.Millisecond))
}

func rssKB(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb
		}
	}
	return 0
}

func metric(t *testing.T, addr, name string) float64 {
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}
