package main

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/valyala/fasthttp"

	"usher/internal/pow"
)

// BenchmarkJoinWithProof is BenchmarkJoin on a queue that enforces a proof
// of work: the difference is the proof's whole cost in the gateway (parse,
// HMAC, SHA-256, the spend's SET NX in the line's pipelines). The proofs
// are made before the clock starts, at difficulty 0: checking one costs
// the same at any difficulty (one SHA-256).
func BenchmarkJoinWithProof(b *testing.B) {
	h := newHarness(b)
	h.putQueue(h.queue, `{"rateLimit": `+limitsOff+`, "challenge": {"mode": "enforce", "difficulty": 0}}`, 200)
	handler := h.app.Handler()
	path := "/v1/queues/" + h.queue + "/tickets"
	peer := netip.IPv4Unspecified() // fasthttp's RemoteIP without a connection
	proofs := make([]string, b.N)
	for i := range proofs {
		c := h.gw.challenges.Issue(h.queue, peer, 0, h.gw.now())
		proofs[i] = pow.Value(c.Challenge, "0")
	}
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI(path)
		ctx.Request.Header.Set("X-User-Id", fmt.Sprintf("pow-user-%d", i))
		ctx.Request.Header.Set(pow.Header, proofs[i])
		handler(&ctx)
		if ctx.Response.StatusCode() != 202 {
			b.Fatalf("join = %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}
