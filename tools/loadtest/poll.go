package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// polls puts shoppers in a paused line, then polls their tickets as fast as
// conns connections allow, and reports the gateway's CPU per poll.
func polls(ctx context.Context, c *client, o options, progress io.Writer) (result, error) {
	res := result{Scenario: "poll", Started: time.Now(), Figures: map[string]float64{}, Invariants: map[string]int64{}}
	if err := c.admin("PUT", "/v1/admin/queues/"+o.queue, o.queueConfig(map[string]any{"targetActive": 1, "state": "paused"}), nil); err != nil {
		return res, err
	}
	tickets := make([]string, o.shoppers)
	var next atomic.Int64
	var wg sync.WaitGroup
	var joinErr atomic.Value
	prefix := fmt.Sprintf("lp%d-", time.Now().UnixNano()%1e9)
	for range min(o.conns, 128) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(tickets) || ctx.Err() != nil {
					return
				}
				var body struct{ Ticket string }
				code, err := c.do("POST", "/v1/queues/"+o.queue+"/tickets", map[string]string{"X-User-Id": prefix + strconv.Itoa(i)}, nil, &body)
				if err != nil || code >= 300 {
					joinErr.Store(fmt.Errorf("join %d: %d %v", i, code, err))
					return
				}
				tickets[i] = body.Ticket
			}
		}()
	}
	wg.Wait()
	if err, _ := joinErr.Load().(error); err != nil {
		return res, err
	}
	fmt.Fprintf(progress, "%d shoppers in line; polling for %v\n", o.shoppers, o.duration)
	rec := newRecorder()
	cpu0, _ := c.processCPU()
	start := time.Now()
	stop := time.Now().Add(o.duration)
	var waitingSeen atomic.Int64
	for w := range o.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for time.Now().Before(stop) && ctx.Err() == nil {
				tk := tickets[r.IntN(len(tickets))]
				var body struct{ Status string }
				t0 := time.Now()
				code, err := c.do("GET", "/v1/queues/"+o.queue+"/tickets/"+tk, nil, nil, &body)
				rec.add(time.Since(t0), code, err)
				if body.Status == "WAITING" {
					waitingSeen.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, _ := c.processCPU()
	s := rec.summary(fmt.Sprintf("poll, %d waiting", o.shoppers), elapsed)
	res.Steps = []step{s}
	if s.Requests > 0 {
		res.Figures["gateway CPU µs per poll"] = (cpu1 - cpu0) * 1e6 / float64(s.Requests)
	}
	res.Invariants["polls not answered WAITING"] = int64(s.Requests) - waitingSeen.Load()
	return res, nil
}
