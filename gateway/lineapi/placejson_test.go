package lineapi

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"usher/internal/catalog"
)

// A join's or poll's answer is the bytes encoding/json would write for its
// place, whatever the place holds.
func TestPlaceJSONSameBytes(t *testing.T) {
	eta, zero, line, minus := int64(42), int64(0), int64(1200), int64(-1)
	ready := time.Date(2026, 12, 2, 6, 30, 0, 123456789, time.UTC)
	expires := ready.Add(5 * time.Minute).In(time.FixedZone("KST", 9*3600))
	whole := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	farOut := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]Place{
		"empty":                   {},
		"waiting":                 {Ticket: "t2.ZGVtbw.YWxpY2U.lq3k2m1x.42.abc_-", Queue: "demo", Status: "WAITING", Position: 7, Waiting: &line, ETASeconds: &eta, PollAfterMs: 2500, Events: "http://localhost:8081/v1/queues/demo/tickets/t2.x/events"},
		"eta zero, position zero": {Queue: "demo", Status: "WAITING", ETASeconds: &zero, Waiting: &zero},
		"ready": {Ticket: "t", Queue: "demo", Status: "READY", Waiting: &eta, Events: "/e", Token: "v1.eyJhIjoxfQ.sig",
			ReadyAt: &ready, ExpiresAt: &expires},
		"closed":     {Status: "CLOSED", Reason: "sold_out"},
		"negative":   {Status: "WAITING", Waiting: &minus},
		"stock":      {Status: "WAITING", Stock: "available", SKUs: []string{"SKU-1", "sku 2", `<"&>`}},
		"empty skus": {Status: "WAITING", SKUs: []string{}},
		"pre-queue":  {Status: "PRE_QUEUE", OpensAt: &whole},
		"notice": {Status: "WAITING", Notice: &catalog.Notice{Message: "Payments are slow — \"hang on\" <b>&</b>\n\u2028 \xff",
			Level: catalog.NoticeWarning, Since: ready}},
		"escapes everywhere":         {Ticket: "\x00\x1f", Queue: "é", Status: "\\", Events: "a&b", Token: "<", Reason: ">", Stock: "\u2029"},
		"a time json refuses":        {Status: "READY", ReadyAt: &farOut},
		"a notice time json refuses": {Status: "WAITING", Notice: &catalog.Notice{Message: "m", Level: "info", Since: farOut}},
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			want, wantErr := json.Marshal(p)
			got, err := p.appendJSON([]byte("prefix"))
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("error %v, encoding/json's %v", err, wantErr)
			}
			if err == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Fatalf("appendJSON wrote\n%s\nencoding/json writes\n%s", got, want)
			}
		})
	}
}

func FuzzPlaceJSONSameBytes(f *testing.F) {
	f.Add("t2.a.b.c.1.m", "demo", "WAITING", int64(3), int64(10), int64(5), "ev", "tok", "reason", "sku", "msg", int64(1764657000123456789), true)
	f.Add("<&>", "\xff", "\u2028", int64(0), int64(-1), int64(0), "", "", "", "", "", int64(-1<<62), false)
	f.Fuzz(func(t *testing.T, ticket, queue, status string, pos, waiting, after int64, events, token, reason, sku, msg string, ns int64, pointers bool) {
		p := Place{Ticket: ticket, Queue: queue, Status: status, Position: pos, PollAfterMs: after,
			Events: events, Token: token, Reason: reason, Stock: sku}
		if waiting%2 == 0 { // and none, as a CLOSED answer says
			p.Waiting = &waiting
		}
		if pointers {
			at := time.Unix(0, ns).In(time.FixedZone("", int(pos%50000)))
			p.ETASeconds, p.ReadyAt, p.ExpiresAt, p.OpensAt = &after, &at, &at, &at
			p.SKUs = []string{sku, reason}
			p.Notice = &catalog.Notice{Message: msg, Level: status, Since: at}
		}
		want, wantErr := json.Marshal(p)
		got, err := p.appendJSON(nil)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("error %v, encoding/json's %v", err, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("appendJSON wrote\n%s\nencoding/json writes\n%s", got, want)
		}
	})
}

func BenchmarkPlaceJSON(b *testing.B) {
	eta, line := int64(42), int64(1200)
	p := Place{Ticket: "t2.ZGVtbw.YWxpY2U.lq3k2m1x.42.0123456789abcdefghijkl", Queue: "demo", Status: "WAITING", Position: 7,
		Waiting: &line, ETASeconds: &eta, PollAfterMs: 2500, Events: "http://localhost:8081/v1/queues/demo/tickets/t2.ZGVtbw.YWxpY2U.lq3k2m1x.42.0123456789abcdefghijkl/events"}
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.appendJSON(make([]byte, 0, 512)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
