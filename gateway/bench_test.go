package main

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"usher/gateway/gate"
)

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serveDirect calls the gateway's handler without a network in between, so
// ns/op is the gateway's own time plus the Redis/NATS round trips, and
// cpu-ns/op is the CPU the gateway process burns per request (Redis and
// NATS run in other processes).
func serveDirect(b *testing.B, h *harness, method, path, user string, wantStatus int, each func(i int)) {
	handler := h.app.Handler()
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	i := 0
	for b.Loop() {
		each(i)
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod(method)
		ctx.Request.SetRequestURI(path)
		if user != "" {
			ctx.Request.Header.Set("X-User-Id", fmt.Sprintf("%s%d", user, i))
		}
		handler(&ctx)
		if ctx.Response.StatusCode() != wantStatus {
			b.Fatalf("%s %s = %d %s", method, path, ctx.Response.StatusCode(), ctx.Response.Body())
		}
		i++
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

func BenchmarkPoll(b *testing.B) {
	h := newHarness(b)
	for i := 0; i < 1000; i++ {
		h.join(fmt.Sprintf("u%d", i))
	}
	tk := h.join("me").str("ticket")
	serveDirect(b, h, "GET", "/v1/queues/"+h.queue+"/tickets/"+tk, "", 200, func(int) {})
}

func BenchmarkJoin(b *testing.B) {
	h := newHarness(b)
	serveDirect(b, h, "POST", "/v1/queues/"+h.queue+"/tickets", "bench-user-", 202, func(int) {})
}

// BenchmarkJoinParallel is the join under concurrency, as a busy gateway
// sees it: many requests in flight, so the batcher's pipelines fill.
// cpu-ns/op counts this process, which also hosts the embedded NATS server.
func BenchmarkJoinParallel(b *testing.B) {
	h := newHarness(b)
	handler := h.app.Handler()
	var n atomic.Int64
	path := "/v1/queues/" + h.queue + "/tickets"
	b.SetParallelism(64)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		var ctx fasthttp.RequestCtx
		for pb.Next() {
			ctx.Request.Reset()
			ctx.Response.Reset()
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetRequestURI(path)
			ctx.Request.Header.Set("X-User-Id", fmt.Sprintf("p%d", n.Add(1)))
			handler(&ctx)
			if ctx.Response.StatusCode() != 202 {
				b.Errorf("join = %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
				return
			}
		}
	})
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkGateCheck is a proxy's question about a request with a good
// pass: the gate's hot path — a MAC, the user compared, one script that
// finds the admission holding its slot and records the use, the entry
// token's signature — in one process, beside BenchmarkPoll.
func BenchmarkGateCheck(b *testing.B) {
	h := newHarness(b)
	h.withGate(h.gateRule(""))
	pass, _ := h.pass("alice")
	handler := h.app.Handler()
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod("GET")
		ctx.Request.SetRequestURI("/v1/gate")
		ctx.Request.Header.Set("X-Forwarded-Uri", "/shop/item")
		ctx.Request.Header.Set("X-Forwarded-Host", "shop.test")
		ctx.Request.Header.Set("X-User-Id", "alice")
		ctx.Request.Header.SetCookie(gate.CookieName, pass)
		handler(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("gate with a pass = %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}
