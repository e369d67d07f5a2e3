package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sseScenario holds n shoppers on Server-Sent Events streams, then admits
// them (-max-admit-per-tick per tick; 0 admits all in one tick) and measures how late each READY arrives after
// its readyAt — the notifier's delivery latency under its full load — and
// the notifier's memory per connected client.
func sseScenario(ctx context.Context, c *client, o options, progress io.Writer) (result, error) {
	res := result{Scenario: "sse", Started: time.Now(), Figures: map[string]float64{}, Invariants: map[string]int64{}}
	if err := c.admin("PUT", "/v1/admin/queues/"+o.queue, o.queueConfig(map[string]any{"targetActive": 1, "state": "paused"}), nil); err != nil {
		return res, err
	}
	places, err := joinMany(ctx, c, o.queue, o.shoppers, "s")
	if err != nil {
		return res, err
	}
	base, _ := scrape(o.notifier + "/metrics")
	fmt.Fprintf(progress, "%d shoppers in line; opening %d streams\n", o.shoppers, o.shoppers)
	streams := &sseClients{ready: make(map[int]time.Duration)}
	sctx, cancel := context.WithTimeout(ctx, o.duration+2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	streams.connect(ctx, sctx, &wg, o.notifier, o.queue, places)
	held, _ := scrape(o.notifier + "/metrics")
	res.Figures["streams connected"] = float64(streams.connected.Load())
	if n := streams.connected.Load(); n > 0 && held != nil && base != nil {
		res.Figures["notifier RSS KiB per stream"] = (held.value("process_resident_memory_bytes") - base.value("process_resident_memory_bytes")) / 1024 / float64(n)
	}
	fmt.Fprintf(progress, "%d streams open (%d failed); admitting %d per 100 ms tick (0: all at once)\n", streams.connected.Load(), streams.failed.Load(), o.maxAdmitPerTick)
	open := time.Now()
	if err := c.admin("PUT", "/v1/admin/queues/"+o.queue, o.queueConfig(map[string]any{"targetActive": o.shoppers, "maxAdmitPerTick": o.maxAdmitPerTick, "state": "open", "tickMs": 100}), nil); err != nil {
		return res, err
	}
	deadline := time.Now().Add(o.duration)
	for streams.count() < int(streams.connected.Load()) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if after, err := scrape(o.notifier + "/metrics"); err == nil && held != nil {
		addNotifierDelivery(&res, held, after)
	}
	streams.addDelivery(&res, time.Since(open))
	if n := streams.connected.Load(); o.anchor && n > 0 {
		addMemoryAnchor(ctx, &res, int(min(n, int64(anchorCap()))), progress)
	}
	return res, nil
}

// connect opens a stream for each place, 256 connecting at most at once,
// and waits until each has connected or failed (or ctx ends). The streams
// read on under sctx, counted by wg.
func (s *sseClients) connect(ctx, sctx context.Context, wg *sync.WaitGroup, notifier, q string, places []place) {
	sem := make(chan struct{}, 256) // connect at a bounded pace
	for i, p := range places {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			s.follow(sctx, notifier, q, p.Ticket, i, func(ok bool) {
				<-sem
				if ok {
					s.connected.Add(1)
				} else {
					s.failed.Add(1)
				}
			})
		}()
	}
	for s.connected.Load()+s.failed.Load() < int64(len(places)) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
}

// addNotifierDelivery is the notifier's own account of the deliveries
// between two scrapes, which splits the blame: late at the notifier (the
// admission event, or the write) or between its write and this client's
// read (this process, on the same cores).
func addNotifierDelivery(res *result, before, after metricsSnapshot) {
	for name, metric := range map[string]string{
		"notifier: ready written after readyAt":   "usher_ready_delivery_seconds",
		"notifier: admission event after readyAt": "usher_admission_event_lag_seconds",
	} {
		if h := histogram(before, after, metric); h.count > 0 {
			res.Figures[name+", p50 ms (bucket bound)"] = h.quantile(0.5) * 1000
			res.Figures[name+", p99 ms (bucket bound)"] = h.quantile(0.99) * 1000
		}
	}
}

// addDelivery records how READY reached the streams over the sale's
// length: readyAt to received, and every stream told exactly once and
// never early.
func (s *sseClients) addDelivery(res *result, sale time.Duration) {
	rec := newRecorder()
	for _, d := range s.snapshot() {
		rec.add(d, 200, nil)
	}
	res.Steps = []step{rec.summary("READY delivery (readyAt → received)", sale)}
	res.Invariants["streams without READY"] = s.connected.Load() - int64(s.count())
	res.Invariants["READY received twice"] = s.dupes.Load()
	res.Invariants["READY before readyAt"] = s.early.Load()
	if n := s.early.Load(); n > 0 {
		res.Figures["READY before readyAt, most, ms"] = float64(s.earliest.Load()) / 1e6
	}
	res.Invariants["streams that failed to connect"] = s.failed.Load()
}

// addMemoryAnchor has a bare net/http SSE server hold n idle streams, and
// sets the notifier's memory per stream beside its.
func addMemoryAnchor(ctx context.Context, res *result, n int, progress io.Writer) {
	fmt.Fprintf(progress, "anchor: a bare SSE server holding %d idle streams\n", n)
	kib, got, err := sseAnchorMemory(ctx, n, 3*time.Minute)
	if err != nil {
		fmt.Fprintf(progress, "anchor failed: %v\n", err)
		return
	}
	res.Figures["anchor streams"] = float64(got)
	res.Figures["anchor RSS KiB per stream"] = kib
	if v, ok := res.Figures["notifier RSS KiB per stream"]; ok && kib > 0 {
		res.Figures["notifier ÷ anchor RSS per stream"] = v / kib
	}
}

// sseClients collects READY arrivals.
type sseClients struct {
	connected, failed atomic.Int64 // streams that connected, that did not
	mu                sync.Mutex
	ready             map[int]time.Duration
	dupes             atomic.Int64
	early             atomic.Int64
	earliest          atomic.Int64 // ns: the most a READY came before its readyAt
}

func (s *sseClients) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ready)
}

func (s *sseClients) snapshot() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]time.Duration, 0, len(s.ready))
	for _, d := range s.ready {
		out = append(out, d)
	}
	return out
}

// follow reads one ticket's stream until ctx ends. Clients spread over
// source addresses 127.0.0.2–127.0.0.9, since one source address has about
// 28,000 ports towards one server port.
func (s *sseClients) follow(ctx context.Context, notifier, q, ticket string, i int, connected func(bool)) {
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}).DialContext, DisableCompression: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, "GET", notifier+"/v1/queues/"+q+"/tickets/"+ticket+"/events", nil)
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil || res.StatusCode != 200 {
		connected(false)
		return
	}
	defer res.Body.Close()
	connected(true)
	readEvents(res.Body, func(event, data string) bool {
		if event != "ready" {
			return true
		}
		got := time.Now()
		var r struct {
			ReadyAt time.Time `json:"readyAt"`
		}
		if json.Unmarshal([]byte(data), &r) == nil {
			s.mu.Lock()
			if _, seen := s.ready[i]; seen {
				s.dupes.Add(1)
			} else {
				s.ready[i] = got.Sub(r.ReadyAt)
			}
			s.mu.Unlock()
			if got.Before(r.ReadyAt) {
				s.early.Add(1)
				for by := int64(r.ReadyAt.Sub(got)); ; {
					if cur := s.earliest.Load(); by <= cur || s.earliest.CompareAndSwap(cur, by) {
						break
					}
				}
			}
		}
		return true
	})
}

// readEvents reads a text/event-stream, calling fn with each event's name
// and data until fn returns false or the stream ends. It reads what usher's
// notifier sends (one data line per event); comments and ids are skipped.
func readEvents(r io.Reader, fn func(event, data string) bool) error {
	sc := bufio.NewScanner(r)
	var event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			data = strings.TrimSpace(line[5:])
		case line == "":
			if event != "" && !fn(event, data) {
				return nil
			}
			event, data = "", ""
		}
	}
	return sc.Err()
}

// joinMany puts n shoppers in line with a bounded number of connections.
func joinMany(ctx context.Context, c *client, q string, n int, prefix string) ([]place, error) {
	places := make([]place, n)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	tag := fmt.Sprintf("%s%d-", prefix, time.Now().UnixNano()%1e9)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil || firstErr.Load() != nil {
					return
				}
				p, err := shopper{c: c, q: q, user: fmt.Sprintf("%s%d", tag, i)}.join()
				if err != nil {
					firstErr.Store(err)
					return
				}
				places[i] = p
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	return places, nil
}

// paced has n shoppers poll exactly as the gateway paces them
// (pollAfterMs) for the run's duration: the request rate SSE saves.
func paced(ctx context.Context, c *client, o options, progress io.Writer) (result, error) {
	res := result{Scenario: "paced polling", Started: time.Now(), Figures: map[string]float64{}, Invariants: map[string]int64{}}
	if err := c.admin("PUT", "/v1/admin/queues/"+o.queue, o.queueConfig(map[string]any{"targetActive": 1, "state": "paused"}), nil); err != nil {
		return res, err
	}
	places, err := joinMany(ctx, c, o.queue, o.shoppers, "p")
	if err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "%d shoppers polling at pollAfterMs for %v\n", o.shoppers, o.duration)
	rec := newRecorder()
	pctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, p := range places {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-pctx.Done():
					return
				case <-time.After(time.Duration(max(p.PollAfterMs, 50)) * time.Millisecond):
				}
				t0 := time.Now()
				code, err := c.do("GET", "/v1/queues/"+o.queue+"/tickets/"+p.Ticket, nil, nil, &p)
				rec.add(time.Since(t0), code, err)
			}
		}()
	}
	wg.Wait()
	s := rec.summary(fmt.Sprintf("%d shoppers polling", o.shoppers), time.Since(start))
	res.Steps = []step{s}
	res.Figures["poll requests per second"] = s.Throughput
	res.Figures["poll requests per shopper per minute"] = s.Throughput * 60 / float64(o.shoppers)
	return res, nil
}
