package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/shopper"
	"usher/internal/testenv"
	"usher/internal/ticket"
	"usher/internal/token"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
)

// A stream is framed as the spec says, with the headers a browser and a
// proxy need, and starts with a retry hint and the current state.
func TestStreamFramingFollowsTheSpec(t *testing.T) {
	w := newWorld(t)
	n := w.start("USHER_NOTIFIER_HEARTBEAT", "50ms", "USHER_NOTIFIER_CORS_ORIGINS", "*") // any origin: fine on loopback
	w.join(1, "alice")
	tk := w.join(2, "bob")
	req, _ := http.NewRequest("GET", n.url(w.queue, tk), nil)
	req.Header.Set("Origin", "http://shop.example")
	s := openReq(t, req)
	h := s.res.Header
	for k, want := range map[string]string{
		"Content-Type":                "text/event-stream",
		"Cache-Control":               "no-store",
		"Access-Control-Allow-Origin": "*",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	first := s.next(5 * time.Second)
	if first.typ != "position" || first.id != "1" || first.retry != 2000 {
		t.Fatalf("first event = %+v, want position with id 1 after retry: 2000", first)
	}
	if p := decode[positionData](t, first); p.Position != 2 || p.Waiting != 2 {
		t.Errorf("first position = %+v, want 2 of 2", p)
	}
	// Heartbeats are comments: they reach the parser but dispatch nothing.
	w.join(3, "carol") // changes "waiting": the next event carries the comments before it
	ev := s.until("position", 5*time.Second)
	if ev.id != "2" || decode[positionData](t, ev).Waiting != 3 {
		t.Errorf("second event = %+v, want position id 2 with 3 waiting", ev)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		w.join(uint64(10+time.Now().UnixNano()%1000), fmt.Sprint("u", time.Now().UnixNano()))
		ev := s.next(5 * time.Second)
		return len(ev.comments) > 0 && ev.comments[0] == "hb"
	}, "no heartbeat comment seen")
}

// openReq sends req and parses its stream (see open).
func openReq(t *testing.T, req *http.Request) *sub {
	t.Helper()
	ctx, cancel := context.WithCancel(req.Context())
	req = req.WithContext(ctx)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return parse(t, res, cancel)
}

// READY goes out at readyAt, never before; until then the shopper is first
// in line.
func TestReadyArrivesAtReadyAtNeverBefore(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "alice")
	s := open(t, n.url(w.queue, tk), "")
	s.until("position", 5*time.Second)
	ads := w.admit(1, 1500*time.Millisecond) // readyAt somewhere in the next 1.5 s
	var ev sseEvent
	for ev = s.next(10 * time.Second); ev.typ == "position"; ev = s.next(10 * time.Second) {
		if p := decode[positionData](t, ev); p.Position != 1 || p.ETASeconds == nil || *p.ETASeconds != 0 {
			t.Errorf("position after admission = %+v, want 1 with eta 0", p)
		}
	}
	if ev.typ != "ready" {
		t.Fatalf("event after admission = %+v, want position 1 then ready", ev)
	}
	got := time.Now()
	readyAt := ads[0].ReadyAt
	if got.Before(readyAt) {
		t.Fatalf("ready received at %v, before readyAt %v", got, readyAt)
	}
	r := decode[readyData](t, ev)
	if !r.ReadyAt.Equal(readyAt) || !r.ExpiresAt.Equal(ads[0].ExpiresAt) {
		t.Errorf("ready = %+v, want readyAt %v expiresAt %v", r, readyAt, ads[0].ExpiresAt)
	}
	keys, err := token.LoadKeyring(w.env["USHER_DATA_DIR"]+"/signing.key", nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := keys.Verify(r.Token, got)
	if err != nil || c.ID != ads[0].TokenID || c.User != "alice" || c.Queue != w.queue {
		t.Errorf("token claims = %+v, %v; want token %s of alice in %s", c, err, ads[0].TokenID, w.queue)
	}
}

// A client that reconnects after READY, with its Last-Event-ID, gets READY
// again at once — right after the notice a resumed stream opens with ({}
// here: none is up) — and ids keep growing.
func TestReconnectAfterReadyGetsReadyAgain(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "alice")
	s := open(t, n.url(w.queue, tk), "")
	w.admit(1, 100*time.Millisecond)
	first := s.until("ready", 10*time.Second)
	s.close()
	again := open(t, n.url(w.queue, tk), first.id)
	last, _ := strconv.ParseUint(first.id, 10, 64)
	if ev := again.next(5 * time.Second); ev.typ != "notice" || ev.data != "{}" || ev.id != strconv.FormatUint(last+1, 10) {
		t.Fatalf("first event after reconnecting with Last-Event-ID %s = %+v, want notice {} with id %d", first.id, ev, last+1)
	}
	ev := again.next(5 * time.Second)
	if ev.typ != "ready" || ev.id != strconv.FormatUint(last+2, 10) {
		t.Fatalf("event after the notice = %+v, want ready with id %d", ev, last+2)
	}
	if got, want := decode[readyData](t, ev).Token, decode[readyData](t, first).Token; got != want {
		t.Errorf("token after reconnect differs from the first one")
	}
}

// A notifier that was down when the admission happened still delivers READY
// to the client's next connection.
func TestRestartedNotifierStillDeliversReady(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "alice")
	s := open(t, n.url(w.queue, tk), "")
	pos := s.until("position", 5*time.Second)
	n.stop()
	if _, ok := <-drainEvents(s); ok {
		t.Fatal("stream still open after the notifier stopped")
	}
	w.admit(1, 100*time.Millisecond) // nobody listens
	n2 := w.start("USHER_NOTIFIER_ADDR", n.addr)
	again := open(t, n2.url(w.queue, tk), pos.id)
	if ev := again.until("ready", 10*time.Second); decode[readyData](t, ev).Token == "" {
		t.Fatalf("ready after restart = %+v, want a token", ev)
	}
}

// drainEvents returns the stream's channel once every buffered event is read.
func drainEvents(s *sub) <-chan sseEvent {
	for {
		select {
		case _, ok := <-s.events:
			if !ok {
				return s.events
			}
		case <-time.After(10 * time.Second):
			return s.events
		}
	}
}

// Positions follow the head as it advances, from one bulk read per tick,
// and are corrected when someone ahead leaves.
func TestPositionsFollowTheHead(t *testing.T) {
	w := newWorld(t)
	n := w.start("USHER_NOTIFIER_RESYNC_PER_TICK", "2")
	for i := uint64(1); i <= 4; i++ {
		w.join(i, fmt.Sprint("u", i))
	}
	tk := w.join(5, "eve")
	s := open(t, n.url(w.queue, tk), "")
	if p := decode[positionData](t, s.until("position", 5*time.Second)); p.Position != 5 {
		t.Fatalf("position = %+v, want 5", p)
	}
	w.admit(2, 100*time.Millisecond)
	waitPosition(t, s, 3)
	if _, err := linetest.Leave(context.Background(), w.line, w.queue, 4, "u4"); err != nil {
		t.Fatal(err)
	}
	waitPosition(t, s, 2) // found at a resync
}

func waitPosition(t *testing.T, s *sub, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got positionData
	for time.Now().Before(deadline) {
		got = decode[positionData](t, s.until("position", time.Until(deadline)))
		if got.Position == want {
			return
		}
	}
	t.Fatalf("position = %+v, want %d", got, want)
}

// A queue that closes tells its waiting shoppers, and their streams end.
func TestClosingTheQueueEndsWaitingStreams(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	s := open(t, n.url(w.queue, w.join(1, "alice")), "")
	s.until("position", 5*time.Second)
	w.configure(func(c *catalog.Config) { c.State, c.ClosedReason = catalog.StateClosed, catalog.ReasonSoldOut })
	if r := decode[closedData](t, s.until("closed", 10*time.Second)); r.Reason != catalog.ReasonSoldOut {
		t.Errorf("closed = %+v, want reason %s", r, catalog.ReasonSoldOut)
	}
	if _, ok := <-drainEvents(s); ok {
		t.Error("stream still open after closed")
	}
	// A shopper connecting afterwards is told at once.
	late := open(t, n.url(w.queue, w.join(2, "bob")), "")
	if ev := late.next(5 * time.Second); ev.typ != "closed" {
		t.Errorf("first event on a closed queue = %+v, want closed", ev)
	}
}

// A token that runs out unused ends the stream with expired.
func TestUnusedTokenExpires(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	s := open(t, n.url(w.queue, w.join(1, "alice")), "")
	w.tick(1, time.Second, 100*time.Millisecond)
	w.announce()
	s.until("ready", 10*time.Second)
	if ev := s.until("expired", 10*time.Second); decode[expiredData](t, ev).ExpiresAt == nil {
		t.Errorf("expired = %+v, want its expiresAt", ev)
	}
}

// A stream opened after the token ran out says when it expired, as one
// open across the expiry does (the API guide's expired event carries
// expiresAt): it said {}.
func TestAStreamOpenedAfterTheExpirySaysWhen(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "alice")
	w.tick(1, time.Second, 100*time.Millisecond)
	adm := w.announce()
	time.Sleep(1500 * time.Millisecond)
	w.tick(1, time.Second, 100*time.Millisecond) // the line expires the token
	s := open(t, n.url(w.queue, tk), "")
	ev := s.until("expired", 10*time.Second)
	if got := decode[expiredData](t, ev).ExpiresAt; got == nil || !got.Equal(adm[0].ExpiresAt) {
		t.Errorf("expired = %s, want expiresAt %s", ev.data, adm[0].ExpiresAt)
	}
}

// A READY shopper whose token became a final order hears closed (used)
// at once, not when the token would have expired.
func TestAFinishedOrderEndsTheStream(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	s := open(t, n.url(w.queue, w.join(1, "alice")), "")
	ctx := context.Background()
	w.tick(1, time.Hour, 100*time.Millisecond)
	w.announce()
	s.until("ready", 10*time.Second)
	tokenID := waitqueue.TokenID(w.queue, w.epoch, 1)
	body, _ := event.Marshal("completed/ord_x", event.TypeOrderCompleted, "alice", time.Now(), event.OrderFinished{
		OrderID: "ord_x", TokenID: tokenID, Queue: w.queue, User: "alice", SKU: "s", Quantity: 1, Status: "PAID"})
	if _, err := w.js.Publish(ctx, event.OrderCompletedSubject(w.queue), body); err != nil {
		t.Fatal(err)
	}
	if r := decode[closedData](t, s.until("closed", 10*time.Second)); r.Reason != "used" {
		t.Fatalf("closed = %+v, want reason used", r)
	}
}

func TestDecodeFinished(t *testing.T) {
	fin := func(typ, tokenID, q string) []byte {
		b, _ := event.Marshal("x", typ, "u", time.Now(), event.OrderFinished{TokenID: tokenID, Queue: q})
		return b
	}
	tests := []struct {
		name    string
		data    []byte
		wantOK  bool
		wantErr bool
	}{
		{"completed", fin(event.TypeOrderCompleted, "demo:e1:7", "demo"), true, false},
		{"failed", fin(event.TypeOrderFailed, "demo:e1:7", "demo"), true, false},
		{"a request is not an ending", fin(event.TypeOrderRequested, "demo:e1:7", "demo"), false, false},
		{"token of another queue", fin(event.TypeOrderCompleted, "other:e1:7", "demo"), false, true},
		{"garbage", []byte("{"), false, true},
	}
	for _, tt := range tests {
		q, seq, ok, err := decodeFinished(tt.data)
		if ok != tt.wantOK || (err != nil) != tt.wantErr || (ok && (q != "demo" || seq != 7)) {
			t.Errorf("%s: decodeFinished = %q %d %v %v", tt.name, q, seq, ok, err)
		}
	}
}

// Every error a client can cause is a problem+json with the right status.
func TestClientErrorsAreProblems(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	good := w.join(1, "alice")
	other := w.tickets.Issue(ticket.Ticket{Queue: w.queue + "-x", User: "alice", Epoch: w.epoch, Seq: 1})
	// A ticket of the gateway's shadow line: the real ticket's format,
	// signed with a key the notifier does not hold (the gateway derives it
	// from the challenge secret).
	shadowKeys, err := ticket.NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	shadow := shadowKeys.Issue(ticket.Ticket{Queue: w.queue, User: "mallory", Epoch: w.epoch, Seq: 1 << 21})
	base := "http://" + n.addr
	tests := []struct {
		name, method, path string
		want               int
	}{
		{"garbled ticket", "GET", "/v1/queues/" + w.queue + "/tickets/garbage/events", 401},
		{"forged ticket", "GET", "/v1/queues/" + w.queue + "/tickets/" + good[:len(good)-3] + "AAA/events", 401},
		{"unknown queue", "GET", "/v1/queues/nope/tickets/" + good + "/events", 404},
		{"another queue's ticket", "GET", "/v1/queues/" + w.queue + "/tickets/" + other + "/events", 404},
		{"a shadow line's ticket", "GET", "/v1/queues/" + w.queue + "/tickets/" + shadow + "/events", 401},
		{"wrong method", "POST", "/v1/queues/" + w.queue + "/tickets/" + good + "/events", 405},
		{"unknown path", "GET", "/v2/x", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, base+tt.path, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.want || res.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), `"status":`+strconv.Itoa(tt.want)) {
				t.Errorf("%s %s = %d %s %s, want %d problem+json", tt.method, tt.path, res.StatusCode, res.Header.Get("Content-Type"), body, tt.want)
			}
		})
	}
}

// Only the configured origins may open a stream from a page.
func TestCORSAllowsTheConfiguredOrigins(t *testing.T) {
	w := newWorld(t)
	n := w.start("USHER_NOTIFIER_CORS_ORIGINS", "http://shop.example, http://other.example")
	url := n.url(w.queue, w.join(1, "alice"))
	tests := []struct{ origin, want string }{
		{"http://shop.example", "http://shop.example"},
		{"http://other.example", "http://other.example"},
		{"http://evil.example", ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("OPTIONS", url, nil)
		req.Header.Set("Origin", tt.origin)
		req.Header.Set("Access-Control-Request-Method", "GET")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := res.Header.Get("Access-Control-Allow-Origin"); got != tt.want {
			t.Errorf("preflight from %s: Allow-Origin = %q, want %q", tt.origin, got, tt.want)
		}
	}
}

// A client that goes away is noticed at once (the stream's reader sees
// its connection close) and its goroutines end; goleak in TestMain checks
// that none is left.
func TestGoneClientsAreReleased(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "alice")
	var subs []*sub
	for range 20 {
		s := open(t, n.url(w.queue, tk), "")
		s.until("position", 5*time.Second)
		subs = append(subs, s)
	}
	if got := gauge(t, n, "usher_sse_connections"); got != 20 {
		t.Fatalf("usher_sse_connections = %v, want 20", got)
	}
	for _, s := range subs {
		s.close()
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return gauge(t, n, "usher_sse_connections") == 0 },
		"usher_sse_connections did not fall to 0")
}

// gauge reads one unlabelled metric from the notifier's /metrics.
func gauge(t *testing.T, n *notifier, name string) float64 {
	t.Helper()
	res, err := http.Get("http://" + n.addr + "/metrics")
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

// A thousand clients waiting at once each get their READY exactly once.
func TestThousandClientsEachGetReadyExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	const clients = 1000
	w := newWorld(t)
	n := w.start()
	urls := make([]string, clients)
	for i := range urls {
		urls[i] = n.url(w.queue, w.join(uint64(i+1), fmt.Sprint("shopper-", i)))
	}
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	var connected, errs atomic.Int64
	counts := make([]int, clients)
	var wg sync.WaitGroup
	for i := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := countReadies(hc, urls[i], &connected)
			if err != nil {
				errs.Add(1)
			}
			counts[i] = c
		}()
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return connected.Load() == clients },
		"%d of %d clients connected", connected.Load(), clients)
	w.tick(clients, 3*time.Second, 100*time.Millisecond)
	w.announce()
	wg.Wait() // each stream ends with expired once its short-lived token is over
	if errs.Load() != 0 {
		t.Errorf("%d clients failed", errs.Load())
	}
	for i, c := range counts {
		if c != 1 {
			t.Errorf("client %d got %d ready events, want exactly 1", i, c)
		}
	}
}

// countReadies reads a stream to its end (expired) and counts its ready
// events.
func countReadies(hc *http.Client, url string, connected *atomic.Int64) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	res, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	p := newSSEParser(bufio.NewReader(res.Body))
	readies := 0
	for first := true; ; first = false {
		ev, err := p.next()
		if err != nil {
			return readies, err
		}
		if first {
			connected.Add(1)
		}
		switch ev.typ {
		case "ready":
			readies++
		case "expired":
			return readies, nil
		}
	}
}

// Tokens come from the line only: an admission event for a shopper the
// line has not admitted — forged by anyone who can publish on the broker —
// makes no READY; the notifier reads the line and finds them waiting.
func TestAForgedAdmissionEventMintsNoToken(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	honest := open(t, n.url(w.queue, w.join(1, "alice")), "")
	mallory := open(t, n.url(w.queue, w.join(2, "mallory")), "")
	honest.until("position", 5*time.Second)
	mallory.until("position", 5*time.Second)
	now := time.Now()
	forged := event.Admitted{Queue: w.queue, User: "mallory", Seq: 2, TokenID: waitqueue.TokenID(w.queue, w.epoch, 2),
		ReadyAt: now, ExpiresAt: now.Add(time.Hour)}
	body, _ := event.Marshal(forged.TokenID, event.TypeAdmitted, "mallory", now, forged)
	if _, err := w.js.Publish(context.Background(), event.AdmittedSubject(w.queue), body); err != nil {
		t.Fatal(err)
	}
	// Alice's real admission comes after the forged event on the same
	// subscription: once she is READY, the forged one has been handled.
	w.admit(1, 10*time.Millisecond)
	honest.until("ready", 10*time.Second)
	for {
		select {
		case ev, ok := <-mallory.events:
			if ok && ev.typ == "ready" {
				t.Fatalf("a forged admission event made READY: %+v", ev)
			}
			if ok {
				continue
			}
		case <-time.After(200 * time.Millisecond):
		}
		return
	}
}

// A shopper waiting in a stock-aware queue hears the stock (held: the last
// units are with shoppers ahead), and hears the queue close as sold out the
// moment it does — not at the next position tick (an hour here).
func TestStockEventsAndAnImmediateSoldOutClose(t *testing.T) {
	w := newWorld(t)
	w.configure(func(c *catalog.Config) { c.SKU = "sku-" + w.queue })
	n := w.start("USHER_NOTIFIER_POSITION_INTERVAL", "1h")
	ctx := context.Background()
	if err := w.line.SetStock(ctx, w.queue, true, waitqueue.StockLevel{SKU: "sku-" + w.queue, Available: 1, Version: 1}); err != nil {
		t.Fatal(err)
	}
	w.join(1, "alice")
	testenv.Applied(t, w.line, w.queue, w.epoch, 1<<40)
	if r := testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: w.epoch, TargetActive: 5, TickLength: 10 * time.Millisecond,
		TokenTTL: time.Minute, StockAware: true}); r.Admitted != 1 || r.Stock != waitqueue.StockHeld {
		t.Fatalf("tick = %+v, want alice admitted for the one unit and the stock held", r)
	}
	bob := open(t, n.url(w.queue, w.join(2, "bob")), "")
	if got := decode[stockData](t, bob.until("stock", 5*time.Second)); got.Stock != "held" {
		t.Fatalf("stock = %+v, want held", got)
	}
	w.configure(func(c *catalog.Config) { c.State, c.ClosedReason = catalog.StateClosed, catalog.ReasonSoldOut })
	if got := decode[closedData](t, bob.until("closed", 5*time.Second)); got.Reason != "sold_out" {
		t.Fatalf("closed = %+v, want sold_out", got)
	}
}

// READY in a stock-aware queue of variants says which have units left, as
// a READY poll does: the shopper chooses among those, not one that ran out
// while they waited.
func TestReadyInAStockAwareQueueSaysWhatIsLeft(t *testing.T) {
	w := newWorld(t)
	w.configure(func(c *catalog.Config) { c.SKUs = []string{"shoe-41", "shoe-42"} })
	n := w.start()
	ctx := context.Background()
	if err := w.line.SetStock(ctx, w.queue, true, waitqueue.StockLevel{SKU: "shoe-41", Available: 2, Version: 1},
		waitqueue.StockLevel{SKU: "shoe-42", Available: 0, Version: 1}); err != nil {
		t.Fatal(err)
	}
	tk := w.join(1, "alice")
	testenv.Applied(t, w.line, w.queue, w.epoch, 1<<40)
	if r := testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: w.epoch, TargetActive: 5, TickLength: 10 * time.Millisecond,
		TokenTTL: time.Minute, StockAware: true}); r.Admitted != 1 {
		t.Fatalf("tick = %+v, want alice admitted", r)
	}
	s := open(t, n.url(w.queue, tk), "")
	r := decode[readyData](t, s.until("ready", 10*time.Second))
	if r.Token == "" || r.Stock != "available" || !slices.Equal(r.SKUs, []string{"shoe-41"}) {
		t.Errorf("ready = %+v, want a token, stock available and skusAvailable [shoe-41]", r)
	}
}

// A notice reaches every waiting stream the moment the operators put it up
// (not at the next position tick, an hour here), a shopper who connects
// later gets it at once, and taking it down is an empty notice.
func TestANoticeReachesEveryWaitingStreamAtOnce(t *testing.T) {
	w := newWorld(t)
	n := w.start("USHER_NOTIFIER_POSITION_INTERVAL", "1h")
	alice := open(t, n.url(w.queue, w.join(1, "alice")), "")
	alice.until("position", 5*time.Second)
	note := catalog.Notice{Message: "Restock at 10:30: stay in line.", Level: catalog.NoticeWarning, Since: time.Now().UTC().Truncate(time.Second)}
	put := time.Now()
	w.configure(func(c *catalog.Config) { c.Notice = &note })
	if got := decode[catalog.Notice](t, alice.until("notice", 5*time.Second)); got != note {
		t.Fatalf("notice = %+v, want %+v", got, note)
	}
	if d := time.Since(put); d > time.Second {
		t.Errorf("the notice took %s, want under a second", d)
	}
	bob := open(t, n.url(w.queue, w.join(2, "bob")), "")
	if got := decode[catalog.Notice](t, bob.until("notice", 5*time.Second)); got.Message != note.Message {
		t.Fatalf("late joiner's notice = %+v", got)
	}
	w.configure(func(c *catalog.Config) { c.Notice = nil })
	if got := decode[catalog.Notice](t, alice.until("notice", 5*time.Second)); got.Message != "" {
		t.Fatalf("notice after it was taken down = %+v, want empty", got)
	}
}

// A READY shopper's stream is told the notice as a waiting one is, since
// a poll of the same ticket carries it: at once on connect when one is up
// (before ready: see TestTheNoticeIsTheFirstEventOfEveryStream), then each
// change, {} when it is taken down.
func TestANoticeReachesReadyStreamsToo(t *testing.T) {
	w := newWorld(t)
	n := w.start("USHER_NOTIFIER_POSITION_INTERVAL", "1h")
	tk := w.join(1, "alice")
	w.admit(1, 10*time.Millisecond)
	note := catalog.Notice{Message: "Restock at 10:30.", Level: catalog.NoticeInfo, Since: time.Now().UTC().Truncate(time.Second)}
	w.configure(func(c *catalog.Config) { c.Notice = &note })
	// bob, still waiting, is told it: the notifier knows the notice.
	bob := open(t, n.url(w.queue, w.join(2, "bob")), "")
	bob.until("notice", 5*time.Second)

	alice := open(t, n.url(w.queue, tk), "")
	if ev := alice.next(5 * time.Second); ev.typ != "notice" || decode[catalog.Notice](t, ev) != note {
		t.Fatalf("first event of a READY stream = %s %q, want notice %+v", ev.typ, ev.data, note)
	}
	if ev := alice.next(10 * time.Second); ev.typ != "ready" {
		t.Fatalf("event after the notice = %s %q, want ready", ev.typ, ev.data)
	}
	w.configure(func(c *catalog.Config) { c.Notice = nil })
	if ev := alice.until("notice", 5*time.Second); ev.data != "{}" {
		t.Fatalf("READY stream's notice after it was taken down = %q, want {}", ev.data)
	}
	again := catalog.Notice{Message: "Checkout is slow: your token is safe.", Level: catalog.NoticeWarning, Since: time.Now().UTC().Truncate(time.Second)}
	w.configure(func(c *catalog.Config) { c.Notice = &again })
	if got := decode[catalog.Notice](t, alice.until("notice", 5*time.Second)); got != again {
		t.Fatalf("READY stream's notice put up later = %+v, want %+v", got, again)
	}
}

// A stream that resumes (Last-Event-ID) is told the notice at once, {}
// when there is none: a page that lost its connection while the notice was
// taken down drops the banner it still shows. A fresh stream without a
// notice says nothing about it.
func TestAResumedStreamIsToldTheNoticeEvenWhenItWasTakenDown(t *testing.T) {
	w := newWorld(t)
	n := w.start("USHER_NOTIFIER_POSITION_INTERVAL", "1h")
	tk := w.join(1, "alice")
	note := catalog.Notice{Message: "Restock at 10:30.", Level: catalog.NoticeInfo, Since: time.Now().UTC().Truncate(time.Second)}
	w.configure(func(c *catalog.Config) { c.Notice = &note })
	alice := open(t, n.url(w.queue, tk), "")
	got := alice.until("notice", 5*time.Second)
	if decode[catalog.Notice](t, got).Message != note.Message {
		t.Fatalf("notice = %s", got.data)
	}
	last := alice.until("position", 5*time.Second).id
	alice.close()

	// carol's stream stays open: her {} says the notifier knows.
	carol := open(t, n.url(w.queue, w.join(2, "carol")), "")
	carol.until("notice", 5*time.Second)
	w.configure(func(c *catalog.Config) { c.Notice = nil })
	if ev := carol.until("notice", 5*time.Second); ev.data != "{}" {
		t.Fatalf("carol's notice after it was taken down = %q", ev.data)
	}
	resumed := open(t, n.url(w.queue, tk), last)
	if ev := resumed.next(5 * time.Second); ev.typ != "notice" || ev.data != "{}" {
		t.Fatalf("first event of the resumed stream = %s %q, want notice {}", ev.typ, ev.data)
	}
	fresh := open(t, n.url(w.queue, w.join(3, "bob")), "")
	if ev := fresh.next(5 * time.Second); ev.typ != "position" {
		t.Fatalf("first event of a fresh stream without a notice = %s %q, want position", ev.typ, ev.data)
	}
}

// The operators' notice is the first event of every stream that opens
// with one up (docs/api.md, "notice": a resumed stream gets the current one
// first, {} included), whatever the shopper's state: fresh or resumed
// (Last-Event-ID), waiting, admitted before readyAt, READY, pre-queued,
// or ending at once (the queue closed).
// A client that acts on ready at once (@usher/client's wait resolves with
// the READY state and closes the stream) reads nothing after it: told
// ready first, a page that lost its connection kept a banner taken down
// meanwhile, or never showed the one put up.
func TestTheNoticeIsTheFirstEventOfEveryStream(t *testing.T) {
	note := catalog.Notice{Message: "Sizes 40-42 restock at 10:30: keep your place.", Level: catalog.NoticeWarning,
		Since: time.Now().UTC().Truncate(time.Second)}
	noteJSON, _ := json.Marshal(note)
	tests := []struct {
		name   string
		state  string // waiting, admitted (readyAt ahead), ready, pre, closed
		notice *catalog.Notice
		lastID string // Last-Event-ID; "": a fresh stream
		want   []string
	}{
		{"fresh, READY, a notice up", "ready", &note, "", []string{"1 notice " + string(noteJSON), "2 ready"}},
		{"resumed, READY, a notice up", "ready", &note, "41", []string{"42 notice " + string(noteJSON), "43 ready"}},
		{"resumed, READY, none up", "ready", nil, "41", []string{"42 notice {}", "43 ready"}},
		{"fresh, READY, none up", "ready", nil, "", []string{"1 ready"}},
		{"fresh, waiting, a notice up", "waiting", &note, "", []string{"1 notice " + string(noteJSON), "2 position"}},
		{"resumed, waiting, none up", "waiting", nil, "41", []string{"42 notice {}", "43 position"}},
		{"resumed, admitted before readyAt, a notice up", "admitted", &note, "41", []string{"42 notice " + string(noteJSON), "43 position", "44 ready"}},
		{"resumed, pre-queued, none up", "pre", nil, "41", []string{"42 notice {}", "43 prequeue"}},
		{"resumed, the queue closed, a notice up", "closed", &note, "41", []string{"42 notice " + string(noteJSON), "43 closed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			if tt.state == "pre" {
				opens := time.Now().Add(time.Hour).UTC()
				w.configure(func(c *catalog.Config) {
					c.OpensAt = &opens
					c.Lottery = &catalog.Lottery{Commitment: strings.Repeat("0", 64)}
				})
			}
			if tt.state == "closed" {
				w.configure(func(c *catalog.Config) { c.State = catalog.StateClosed })
			}
			w.configure(func(c *catalog.Config) { c.Notice = tt.notice })
			n := w.start("USHER_NOTIFIER_POSITION_INTERVAL", "1h")
			var tk string
			switch tt.state {
			case "pre":
				if _, err := w.line.IngestAs(context.Background(), w.queue, w.epoch, 1, "alice", 0, waitqueue.PreQueue); err != nil {
					t.Fatal(err)
				}
				tk = w.tickets.Issue(ticket.Ticket{Queue: w.queue, User: "alice", Epoch: w.epoch, Seq: 1})
			default:
				tk = w.join(1, "alice")
			}
			switch tt.state {
			case "ready":
				w.admit(1, 10*time.Millisecond)
			case "admitted": // READY at the end of a 2 s tick
				testenv.Applied(t, w.line, w.queue, w.epoch, 1<<40)
				testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: w.epoch, TargetActive: 1, TickLength: 2 * time.Second,
					TokenTTL: time.Minute, Offset: 999})
			}
			if tt.state == "pre" {
				testenv.Eventually(t, 10*time.Second, func() bool {
					res, _ := call(t, "GET", n.url(w.queue, tk), nil) // 503 until the notifier knows the schedule
					return res.StatusCode == http.StatusOK
				}, "the notifier knows the drop's schedule")
			}
			s := open(t, n.url(w.queue, tk), tt.lastID)
			var got []string
			for range tt.want {
				ev := s.next(10 * time.Second)
				g := ev.id + " " + ev.typ
				if ev.typ == "notice" {
					g += " " + ev.data
				}
				got = append(got, g)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("the stream's first events = %q, want %q", got, tt.want)
			}
		})
	}
}

// A pre-queued shopper's stream on a notifier whose catalog does not know
// the drop's schedule yet is asked to retry (503, Retry-After), never told
// a place it does not have (position 0).
func TestAPreQueuedStreamBeforeTheScheduleIsKnownIsToldToRetry(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	if _, err := w.line.IngestAs(context.Background(), w.queue, w.epoch, 1, "carol", 0, waitqueue.PreQueue); err != nil {
		t.Fatal(err)
	}
	tk := w.tickets.Issue(ticket.Ticket{Queue: w.queue, User: "carol", Epoch: w.epoch, Seq: 1})
	res, body := call(t, "GET", n.url(w.queue, tk), nil)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "unavailable") {
		t.Fatalf("stream of a pre-queued ticket, no opensAt known = %d %q %s; want 503 unavailable, Retry-After 1", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
}

// A stream is taken over from net/http once it starts (serve, detach): on
// the wire it is still an HTTP/1.1 response, its header as net/http would
// write it (CORS included), its body delimited by the connection's end.
// Stopping the notifier ends it.
func TestAStreamOnTheWire(t *testing.T) {
	w := newWorld(t)
	n := w.start("USHER_NOTIFIER_CORS_ORIGINS", "https://shop.example")
	tk := w.join(1, "alice")
	r := onTheWire(t, n, "GET", n.url(w.queue, tk), "Origin: https://shop.example")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", n.url(w.queue, tk), nil)
	res, err := http.ReadResponse(r, req)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-store",
		"X-Accel-Buffering": "no", "Access-Control-Allow-Origin": "https://shop.example", "Vary": "Origin"} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if res.StatusCode != 200 || res.ProtoMajor != 1 || res.ProtoMinor != 1 || len(res.TransferEncoding) > 0 || res.ContentLength != -1 || !res.Close {
		t.Errorf("got %s %s, transfer encoding %q, length %d, close %v: want HTTP/1.1 200 delimited by the connection's end",
			res.Proto, res.Status, res.TransferEncoding, res.ContentLength, res.Close)
	}
	if _, err := time.Parse(http.TimeFormat, res.Header.Get("Date")); err != nil {
		t.Errorf("Date %q: %v", res.Header.Get("Date"), err)
	}
	s := parse(t, res, cancel)
	if ev := s.until("position", 5*time.Second); decode[positionData](t, ev).Position != 1 {
		t.Errorf("first position event %+v", ev)
	}
	n.stop()
	select {
	case <-s.done: // the body ended
	case <-time.After(10 * time.Second):
		t.Error("the stream did not end when the notifier stopped")
	}
}

// A scheduled drop's opening never tells a shopper a place below 1 (the
// API's PositionEvent.position has minimum 1): between the catalog saying
// the pre-queue is drawn and the line placing the shopper, a stream open
// across the opening keeps the pre-queue state, and a stream opened then
// says nothing yet; each says its place once the line gives one.
func TestADropsOpeningSaysNoPlaceBelowOne(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	opens := time.Now().Add(time.Second).UTC()
	w.configure(func(c *catalog.Config) {
		c.OpensAt = &opens
		c.Lottery = &catalog.Lottery{Commitment: strings.Repeat("0", 64)}
	})
	n := w.start()
	for seq, user := range []string{"u1", "u2", "u3"} {
		if _, err := w.line.IngestAs(ctx, w.queue, w.epoch, uint64(seq+1), user, 0, waitqueue.PreQueue); err != nil {
			t.Fatal(err)
		}
	}
	ticketOf := func(seq uint64, user string) string {
		return w.tickets.Issue(ticket.Ticket{Queue: w.queue, User: user, Epoch: w.epoch, Seq: seq})
	}
	var across *sub
	testenv.Eventually(t, 10*time.Second, func() bool {
		res, _ := call(t, "GET", n.url(w.queue, ticketOf(1, "u1")), nil) // 503 until the notifier knows the schedule
		if res.StatusCode != http.StatusOK {
			return false
		}
		across = open(t, n.url(w.queue, ticketOf(1, "u1")), "")
		return true
	}, "the notifier knows the drop's schedule")
	across.until("prequeue", 5*time.Second)

	// The drop opens; the catalog says drawn before the line has placed
	// anyone (a draw Redis lost and the admitter redoes, or a notifier
	// that hears the catalog first).
	testenv.Eventually(t, 5*time.Second, func() bool { return time.Now().After(opens) }, "the drop opens")
	w.configure(func(c *catalog.Config) {
		l := *c.Lottery
		l.Drawn = true
		c.Lottery = &l
	})
	opened := open(t, n.url(w.queue, ticketOf(2, "u2")), "")
	// The window: ten position ticks in which neither stream may say a
	// place, and a notice that wakes both.
	w.configure(func(c *catalog.Config) {
		c.Notice = &catalog.Notice{Message: "The drop is open.", Level: catalog.NoticeInfo, Since: time.Now().UTC()}
	})
	window := time.After(10 * 50 * time.Millisecond)
	for quiet := false; !quiet; {
		select {
		case ev := <-across.events:
			checkEvent(t, ev)
			if ev.typ == "position" {
				t.Fatalf("stream open across the opening, before the line placed the shopper: %s %s", ev.typ, ev.data)
			}
		case ev := <-opened.events:
			checkEvent(t, ev)
			if ev.typ == "position" {
				t.Fatalf("stream opened after the opening, before the line placed the shopper: %s %s", ev.typ, ev.data)
			}
		case <-window:
			quiet = true
		}
	}

	// The line draws: u3, u1, u2.
	testenv.Applied(t, w.line, w.queue, w.epoch, 1<<40)
	_, _, version, err := w.line.PreQueue(ctx, w.queue)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.line.Draw(ctx, w.queue, w.epoch, version, []uint64{3, 1, 2}, "digest"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		s    *sub
		want int64
	}{{across, 2}, {opened, 3}} {
		if p := decode[positionData](t, tt.s.until("position", 5*time.Second)); p.Position != tt.want || p.Waiting != 3 {
			t.Errorf("first position once drawn = %+v, want %d of 3", p, tt.want)
		}
	}
}

// Between a scheduled drop's opening and its draw, the stream and a poll
// of the same shopper tell the same place in the same line: the pre-queue
// still to be drawn counts in it, by one rule (the line's, see
// waitqueue.Ranks), for a shopper admitted before the drop was scheduled
// and not READY yet (first of a line that holds it: "1 of 2" in the poll
// and "1 of 5" on the stream before), one who joined since the opening
// (behind the pre-queue), and one whose join the line has not applied yet
// (at the back, behind the pre-queue too: the poll and the stream said
// "2 of 2", and "5 of 5" once the join was applied).
func TestAroundADropsOpeningTheStreamSaysWhatThePollSays(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	n := w.start()
	// alice is admitted, READY at the end of a 10 s tick; the line is empty.
	alice := w.join(1, "alice")
	testenv.Applied(t, w.line, w.queue, w.epoch, 1) // the entries cursor: every join after it is the follower's still
	testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: w.epoch, TargetActive: 1, TickLength: 10 * time.Second,
		TokenTTL: time.Minute, Offset: 999})
	// The operators schedule a drop on the queue nobody waits in; three
	// join its pre-queue.
	opens := time.Now().Add(time.Second).UTC()
	w.configure(func(c *catalog.Config) {
		c.OpensAt = &opens
		c.Lottery = &catalog.Lottery{Commitment: strings.Repeat("0", 64)}
	})
	for seq, user := range []string{"u2", "u3", "u4"} {
		if _, err := w.line.IngestAs(ctx, w.queue, w.epoch, uint64(seq+2), user, 0, waitqueue.PreQueue); err != nil {
			t.Fatal(err)
		}
	}
	// The drop opens; the draw is pending. dave joins, erin's join is not
	// in the line yet.
	testenv.Eventually(t, 5*time.Second, func() bool { return time.Now().After(opens) }, "the drop opens")
	dave := w.join(5, "dave")
	erin := w.tickets.Issue(ticket.Ticket{Queue: w.queue, User: "erin", Epoch: w.epoch, Seq: 6})

	for _, tt := range []struct {
		user, ticket string
		seq          uint64
		want         positionData // what both say
	}{
		{"alice", alice, 1, positionData{Position: 1, Waiting: 5}},
		{"dave", dave, 5, positionData{Position: 4, Waiting: 4}},
		{"erin", erin, 6, positionData{Position: 5, Waiting: 5}},
	} {
		e, err := w.line.Poll(ctx, w.queue, tt.seq)
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := w.queues.Get(w.queue)
		poll, err := shopper.Of(e, cfg, tt.user, time.Now(), nil) // before readyAt: nothing to sign
		if err != nil {
			t.Fatal(err)
		}
		s := open(t, n.url(w.queue, tt.ticket), "")
		// The stream's place once the notifier's position ticks (50 ms)
		// have read the line: the last position of a quiet second.
		var told positionData
		for quiet := time.After(time.Second); quiet != nil; {
			select {
			case ev := <-s.events:
				checkEvent(t, ev)
				if ev.typ == "position" {
					told = decode[positionData](t, ev)
				}
			case <-quiet:
				quiet = nil
			}
		}
		if poll.Status != shopper.Waiting || poll.Position != tt.want.Position || poll.Waiting != tt.want.Waiting {
			t.Errorf("%s's poll = %s %d of %d; want WAITING %d of %d", tt.user, poll.Status, poll.Position, poll.Waiting, tt.want.Position, tt.want.Waiting)
		}
		if told.Position != poll.Position || told.Waiting != poll.Waiting {
			t.Errorf("%s's stream says %d of %d; the poll %d of %d", tt.user, told.Position, told.Waiting, poll.Position, poll.Waiting)
		}
	}
}

// The place an admitted shopper is told until readyAt (first in line) and
// the line's length come from one read of the line, the one that found
// the admission: never the length an earlier read found (3 here, before
// dave joined and the admission took alice out of it).
func TestTheLastPositionBeforeReadyIsOneRead(t *testing.T) {
	w := newWorld(t)
	n := w.start("USHER_NOTIFIER_POSITION_INTERVAL", "1h") // no position ticks: only the reads of the admission
	tk := w.join(1, "alice")
	w.join(2, "bob")
	w.join(3, "carol")
	s := open(t, n.url(w.queue, tk), "")
	if p := decode[positionData](t, s.until("position", 5*time.Second)); p.Position != 1 || p.Waiting != 3 {
		t.Fatalf("position = %+v, want 1 of 3", p)
	}
	w.join(4, "dave") // no position tick tells alice's stream of him
	// alice is admitted, READY at the end of a 2 s tick.
	testenv.Applied(t, w.line, w.queue, w.epoch, 1<<40)
	testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: w.epoch, TargetActive: 1, TickLength: 2 * time.Second,
		TokenTTL: time.Minute, Offset: 999})
	w.announce()
	ev := s.next(10 * time.Second)
	for ; ev.typ == "position"; ev = s.next(10 * time.Second) {
		if p := decode[positionData](t, ev); p.Position != 1 || p.Waiting != 4 {
			t.Errorf("position after the admission = %+v, want 1 of 4 (alice ahead of the line the admission's read found)", p)
		}
	}
	if ev.typ != "ready" {
		t.Fatalf("event after the admission = %s %s, want position, then ready", ev.typ, ev.data)
	}
}

// Until readyAt an admitted shopper's stream says what a poll of theirs
// answers (shopper.Of, the gateway's view): first in line, of a line that
// holds them. Alone, that is 1 of 1 — never "1 of 0", which the line's
// count (the admission took them out of it) would make it.
func TestAnAdmittedShoppersPositionIsWhatThePollSays(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "alice")
	s := open(t, n.url(w.queue, tk), "")
	if p := decode[positionData](t, s.until("position", 5*time.Second)); p.Position != 1 || p.Waiting != 1 {
		t.Fatalf("position = %+v, want 1 of 1", p)
	}
	// alice is admitted, READY at the end of a 3 s tick.
	testenv.Applied(t, w.line, w.queue, w.epoch, 1<<40)
	testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: w.epoch, TargetActive: 1, TickLength: 3 * time.Second,
		TokenTTL: time.Minute, Offset: 999})
	w.announce()
	e, err := w.line.Poll(context.Background(), w.queue, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := w.queues.Get(w.queue)
	poll, err := shopper.Of(e, cfg, "alice", time.Now(), nil) // before readyAt: nothing to sign
	if err != nil || !poll.Admitted {
		t.Fatalf("the poll's view = %+v, %v; want admitted, first in line", poll, err)
	}
	told := 0
	ev := s.next(10 * time.Second)
	for ; ev.typ == "position"; ev = s.next(10 * time.Second) {
		told++
		p := decode[positionData](t, ev)
		if p.Position != 1 || p.Waiting != 1 {
			t.Errorf("position after the admission = %s, want 1 of 1", ev.data)
		}
		if p.Position != poll.Position || p.Waiting != poll.Waiting || p.ETASeconds == nil || *p.ETASeconds != poll.ETA {
			t.Errorf("position after the admission = %s; a poll says %+v", ev.data, poll)
		}
	}
	if ev.typ != "ready" || told == 0 {
		t.Fatalf("after the admission: %d position events, then %s %s; want position, then ready", told, ev.typ, ev.data)
	}
}

// A join the line has not applied yet (Redis lost it, the follower has not
// put it back) is at the back of a line that holds it, as a poll says:
// 3 of 3 behind alice and bob, not 3 of 2.
func TestAJoinNotInTheLineYetIsCountedInIt(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	w.join(1, "alice")
	w.join(2, "bob")
	tk := w.tickets.Issue(ticket.Ticket{Queue: w.queue, User: "carol", Epoch: w.epoch, Seq: 3}) // not in Redis
	s := open(t, n.url(w.queue, tk), "")
	if p := decode[positionData](t, s.until("position", 5*time.Second)); p.Position != 3 || p.Waiting != 3 {
		t.Fatalf("position = %+v, want 3 of 3", p)
	}
}

// A shopper who left hears closed (left), and no place before it: the
// tick that finds them gone from the line tells them nothing derived from
// the rank they had.
func TestAShopperWhoLeftIsToldNoPlaceBeforeClosed(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "alice")
	w.join(2, "bob")
	s := open(t, n.url(w.queue, tk), "")
	if p := decode[positionData](t, s.until("position", 5*time.Second)); p.Position != 1 || p.Waiting != 2 {
		t.Fatalf("position = %+v, want 1 of 2", p)
	}
	if _, err := linetest.Leave(context.Background(), w.line, w.queue, 1, "alice"); err != nil {
		t.Fatal(err)
	}
	ev := s.next(5 * time.Second)
	for ; ev.typ != "closed"; ev = s.next(5 * time.Second) {
		if ev.typ == "position" {
			t.Fatalf("after leaving: %s %s, want closed (left) and no place", ev.typ, ev.data)
		}
	}
	if r := decode[closedData](t, ev); r.Reason != "left" {
		t.Errorf("closed = %+v, want reason left", r)
	}
}

// A READY shopper who leaves hears closed (left) at once on every stream
// they hold — two tabs — not at the token's expiry (an hour here). The
// leave comes as the gateway makes it: the event first, the line's write a
// moment later, so the notifier's first read finds the shopper still READY.
func TestAReadyShopperWhoLeavesIsToldAtOnce(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "alice")
	tabs := []*sub{open(t, n.url(w.queue, tk), ""), open(t, n.url(w.queue, tk), "")}
	w.tick(1, time.Hour, 100*time.Millisecond)
	w.announce()
	for _, s := range tabs {
		s.until("ready", 10*time.Second)
	}
	w.leave(1, "alice", 200*time.Millisecond)
	for i, s := range tabs {
		if r := decode[closedData](t, s.until("closed", 3*time.Second)); r != (closedData{Reason: "left"}) {
			t.Errorf("tab %d: closed = %+v, want reason left", i, r)
		}
	}
}

// A shopper who was gone for the queue's abandonAfterSeconds, and whose
// stream comes back (a laptop waking), is told what a poll says — LEFT,
// abandoned — as closed with reason left (the page offers to join again)
// and abandoned: true.
func TestAnAbandonedShoppersStreamSaysSo(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "alice")
	testenv.Applied(t, w.line, w.queue, w.epoch, 1<<40)
	testenv.Eventually(t, 5*time.Second, func() bool {
		r := testenv.Tick(t, w.line, w.queue, waitqueue.Tick{Epoch: w.epoch, TargetActive: 0, TickLength: 100 * time.Millisecond,
			TokenTTL: time.Minute, AbandonAfter: 100 * time.Millisecond})
		return r.Abandoned == 1
	}, "alice abandoned")
	if e, err := w.line.Poll(context.Background(), w.queue, 1); err != nil || e.Status != waitqueue.Left || e.Reason != waitqueue.ReasonAbandoned {
		t.Fatalf("Poll = %+v, %v; want left, abandoned", e, err)
	}
	s := open(t, n.url(w.queue, tk), "")
	if r := decode[closedData](t, s.until("closed", 5*time.Second)); r != (closedData{Reason: "left", Abandoned: true}) {
		t.Fatalf("closed = %+v, want reason left, abandoned", r)
	}
}

func TestDecodeLeft(t *testing.T) {
	left := func(q string, seq uint64) []byte {
		b, _ := event.Marshal("x", event.TypeLeft, "u", time.Now(), event.Left{Queue: q, User: "u", Seq: seq})
		return b
	}
	tests := []struct {
		name    string
		subject string
		data    []byte
		wantErr bool
	}{
		{"a shopper's leave", event.Live(event.LeaveSubject("demo")), left("demo", 7), false},
		{"another queue's", event.Live(event.LeaveSubject("other")), left("demo", 7), true},
		{"no place", event.Live(event.LeaveSubject("demo")), left("demo", 0), true},
		{"an admission", event.Live(event.LeaveSubject("demo")), func() []byte {
			b, _ := event.Marshal("x", event.TypeAdmitted, "u", time.Now(), event.Admitted{Queue: "demo", Seq: 7})
			return b
		}(), true},
		{"garbage", event.Live(event.LeaveSubject("demo")), []byte("{"), true},
		{"the stored subject, not the live one", event.LeaveSubject("demo"), left("demo", 7), true},
	}
	for _, tt := range tests {
		q, seq, err := decodeLeft(tt.subject, tt.data)
		if (err != nil) != tt.wantErr || (err == nil && (q != "demo" || seq != 7)) {
			t.Errorf("%s: decodeLeft = %q %d %v", tt.name, q, seq, err)
		}
	}
}

// A HEAD of the stream (the GET route takes it) answers the stream's
// header and no body: taken over like a GET, it would have its events
// written after the header of a response that has none.
func TestAHeadOfTheStreamHasNoBody(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	tk := w.join(1, "alice")
	r := onTheWire(t, n, "HEAD", n.url(w.queue, tk), "Connection: close")
	req, _ := http.NewRequest("HEAD", n.url(w.queue, tk), nil)
	res, err := http.ReadResponse(r, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Errorf("HEAD = %s, Content-Type %q; want 200 text/event-stream", res.Status, res.Header.Get("Content-Type"))
	}
	// The connection (Connection: close) ends after the header.
	if rest, err := io.ReadAll(r); len(rest) > 0 || err != nil {
		t.Errorf("after the header of a HEAD: %q, %v; want nothing, then the connection's end", rest, err)
	}
}

// onTheWire sends one HTTP/1.1 request for url with the header line given,
// by hand, to the notifier n and returns the connection to read the answer
// from (10 s at most); it closes when the test ends.
func onTheWire(t *testing.T, n *notifier, method, url, header string) *bufio.Reader {
	t.Helper()
	conn, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	path := strings.TrimPrefix(url, "http://"+n.addr)
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\n\r\n", method, path, n.addr, header)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	return bufio.NewReader(conn)
}

// A notifier holding USHER_NOTIFIER_MAX_STREAMS streams sheds the next one
// — 503 too-many-streams with Retry-After, its client polls meanwhile —
// rather than grow past its memory; once a stream ends, a new one opens.
func TestAFullNotifierRefusesAStreamUntilOneEnds(t *testing.T) {
	w := newWorld(t)
	n := w.start("USHER_NOTIFIER_MAX_STREAMS", "1")
	first := open(t, n.url(w.queue, w.join(1, "u1")), "")
	first.until("position", 5*time.Second)
	second := w.join(2, "u2")
	res, body := call(t, "GET", n.url(w.queue, second), nil)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "10" || !strings.Contains(string(body), "too-many-streams") {
		t.Fatalf("a stream past the bound = %d %q %s; want 503 too-many-streams, Retry-After 10", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	if _, m := call(t, "GET", "http://"+n.addr+"/metrics", nil); !strings.Contains(string(m), "\nusher_sse_streams_refused_total 1\n") {
		t.Errorf("/metrics does not count the refused stream:\n%s", m)
	}
	first.close()
	testenv.Eventually(t, 10*time.Second, func() error {
		res, _ := call(t, "HEAD", n.url(w.queue, second), nil)
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("stream after the first ended = %d", res.StatusCode)
		}
		return nil
	}, "a stream opens once the first ended")
}

// The bound holds under a burst: streams opened all at once, each checked
// before any had registered, do not pass it together.
func TestABurstOfStreamsStaysWithinTheBound(t *testing.T) {
	w := newWorld(t)
	n := w.start("USHER_NOTIFIER_MAX_STREAMS", "3")
	urls := make([]string, 100)
	for i := range urls {
		urls[i] = n.url(w.queue, w.join(uint64(i+1), fmt.Sprintf("u%d", i)))
	}
	codes := make(chan int, len(urls))
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel) // the streams that opened stay open to the end
			req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("GET %s: %v", u, err)
				return
			}
			if res.StatusCode != http.StatusOK {
				res.Body.Close()
			}
			codes <- res.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusOK] != 3 || count[http.StatusServiceUnavailable] != len(urls)-3 {
		t.Fatalf("%d streams opened at once under a bound of 3: %v by status; want 3 OK, the rest 503", len(urls), count)
	}
}

// A shopper whose earlier join is read after their retry (see
// waitqueue/line: the line moves them up to it) holds the retry's ticket;
// their stream follows the entry to its place and is told READY for it.
func TestAStreamFollowsItsEntryMovedUpToAnEarlierJoin(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	w.join(1, "alice")
	w.join(3, "bob")
	tk := w.join(4, "carol") // the retry, ingested first
	s := open(t, n.url(w.queue, tk), "")
	if p := decode[positionData](t, s.until("position", 5*time.Second)); p.Position != 3 {
		t.Fatalf("position = %+v, want 3", p)
	}
	w.join(2, "carol") // her first join, stored earlier
	waitPosition(t, s, 2)
	ads := w.admit(2, 100*time.Millisecond)
	r := decode[readyData](t, s.until("ready", 10*time.Second))
	if len(ads) != 2 || ads[1].Seq != 2 || ads[1].User != "carol" {
		t.Fatalf("admitted %+v, want alice then carol at 2", ads)
	}
	keys, err := token.LoadKeyring(w.env["USHER_DATA_DIR"]+"/signing.key", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := keys.Verify(r.Token, r.ReadyAt.Add(time.Millisecond)); err != nil || c.ID != ads[1].TokenID {
		t.Fatalf("ready token = %+v, %v; want carol's admission %s", c, err, ads[1].TokenID)
	}
}
