package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"usher/api/contract"
	"usher/internal/catalog"
	"usher/internal/testenv"
	"usher/internal/ticket"
	"usher/internal/waitqueue"
)

// The API contract (api/openapi.yaml, which the gateway serves): the
// notifier's stream and its other answers are checked against it. Every
// stream a test opens with open() is checked by its status and headers,
// and every event a test reads with next() by its name and data (the
// schema the document's x-sse-events names); a mismatch fails that test.

// eventsPath is the stream's path in the document.
const eventsPath = "/v1/queues/{queue}/tickets/{ticket}/events"

func contractDoc(t testing.TB) *contract.Doc {
	t.Helper()
	d, err := contract.Load()
	if err != nil {
		t.Fatalf("OpenAPI document: %v", err)
	}
	return d
}

// checkStream checks a stream's answer (its status and headers; the events
// are checked one by one as they are read).
func checkStream(t testing.TB, res *http.Response) {
	t.Helper()
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return // an error answer: the test that expects it checks it
	}
	if err := contractDoc(t).Check(contract.Notifier, res.Request, nil, res, nil); err != nil {
		t.Errorf("API contract: %v", err)
	}
}

// checkEvent checks one event against the document.
func checkEvent(t testing.TB, ev sseEvent) {
	t.Helper()
	if ev.typ == "" && ev.data == "" {
		return // a retry hint or a comment alone
	}
	if err := contractDoc(t).CheckEvent(eventsPath, "GET", ev.typ, []byte(ev.data)); err != nil {
		t.Errorf("API contract: %v", err)
	}
}

// call makes one request to the notifier and checks it with its answer
// against the document.
func call(t *testing.T, method, url string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	var body []byte
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		body, _ = io.ReadAll(res.Body)
	}
	if err := contractDoc(t).Check(contract.Notifier, req, nil, res, body); err != nil {
		t.Errorf("API contract: %v", err)
	}
	return res, body
}

// Every answer of the notifier, and each kind of event, as the document
// says: the stream (position, notice, ready, expired; prequeue; closed),
// its preflight, the errors, the operational endpoints.
func TestContractNotifierAnswers(t *testing.T) {
	w := newWorld(t)
	n := w.start()
	origin := "http://127.0.0.1:8080" // the gateway's, allowed by default
	tkt := w.join(1, "alice")
	url := n.url(w.queue, tkt)

	t.Run("stream", func(t *testing.T) {
		s := open(t, url, "")
		if got := s.res.Header.Get("X-Accel-Buffering"); got != "no" {
			t.Errorf("X-Accel-Buffering = %q", got)
		}
		s.until("position", 5*time.Second)
		w.configure(func(c *catalog.Config) {
			c.Notice = &catalog.Notice{Message: "Restock at 10:00", Level: catalog.NoticeInfo, Since: time.Now().UTC()}
		})
		first := s.until("notice", 5*time.Second)
		w.configure(func(c *catalog.Config) { c.Notice = nil })
		// Taken down: {} — after, at times, the same notice once more (each
		// event is checked against the document all the same).
		for i := 0; ; i++ {
			ev := s.until("notice", 5*time.Second)
			if ev.data == "{}" {
				break
			}
			if ev.data != first.data || i == 3 {
				t.Fatalf("notice taken down: data %s, want {}", ev.data)
			}
		}
		w.tick(1, 1500*time.Millisecond, 10*time.Millisecond)
		w.announce()
		s.until("ready", 5*time.Second)
		s.until("expired", 10*time.Second)
	})
	t.Run("closed", func(t *testing.T) {
		s := open(t, n.url(w.queue, w.join(2, "bob")), "")
		s.until("position", 5*time.Second)
		w.configure(func(c *catalog.Config) { c.State, c.ClosedReason = catalog.StateClosed, catalog.ReasonSoldOut })
		if ev := s.until("closed", 5*time.Second); !strings.Contains(ev.data, "sold_out") {
			t.Errorf("closed: data %s, want reason sold_out", ev.data)
		}
		w.configure(func(c *catalog.Config) { c.State, c.ClosedReason = catalog.StateOpen, "" })
	})
	t.Run("prequeue", func(t *testing.T) {
		// A drop of its own, scheduled from its first configuration: once
		// the notifier knows the queue it knows the opening (a queue
		// rescheduled a moment ago could still be its old self there).
		q := w.queue + "-drop"
		cfg := catalog.Defaults(q)
		opens := time.Now().Add(time.Hour).UTC()
		cfg.OpensAt = &opens
		cfg.Lottery = &catalog.Lottery{Commitment: strings.Repeat("0", 64)}
		if _, err := w.queues.Put(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := w.line.IngestAs(context.Background(), q, w.epoch, 1, "carol", 0, waitqueue.PreQueue); err != nil {
			t.Fatal(err)
		}
		u := n.url(q, w.tickets.Issue(ticket.Ticket{Queue: q, User: "carol", Epoch: w.epoch, Seq: 1}))
		testenv.Eventually(t, 10*time.Second, func() bool {
			res, _ := call(t, "GET", u, nil) // 404 until the notifier knows the queue
			return res.StatusCode == http.StatusOK
		}, "the notifier knows queue %s", q)
		s := open(t, u, "")
		s.until("prequeue", 5*time.Second)
	})
	t.Run("preflight", func(t *testing.T) {
		res, _ := call(t, "OPTIONS", url, map[string]string{"Origin": origin, "Access-Control-Request-Method": "GET"})
		if res.StatusCode != 204 || res.Header.Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("OPTIONS = %d, Access-Control-Allow-Origin %q", res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"))
		}
	})
	t.Run("errors", func(t *testing.T) {
		forged := strings.Replace(tkt, tkt[len(tkt)-4:], "AAAA", 1)
		other := w.tickets.Issue(ticket.Ticket{Queue: "another", User: "alice", Epoch: w.epoch, Seq: 1})
		stale := w.tickets.Issue(ticket.Ticket{Queue: w.queue, User: "alice", Epoch: strings.Repeat("x", len(w.epoch)), Seq: 1})
		for _, tc := range []struct {
			method, url string
			want        int
		}{
			{"GET", n.url("no-such-queue", tkt), 404},
			{"GET", n.url(w.queue, forged), 401},
			{"GET", n.url(w.queue, other), 404},
			{"GET", n.url(w.queue, stale), 410},
			{"POST", url, 405},
			{"DELETE", url, 405},
			{"GET", "http://" + n.addr + "/v1/queues", 404},
			{"GET", "http://" + n.addr + "/openapi.json", 404},
		} {
			res, body := call(t, tc.method, tc.url, map[string]string{"Origin": origin})
			if res.StatusCode != tc.want {
				t.Errorf("%s %s = %d %s, want %d", tc.method, tc.url, res.StatusCode, body, tc.want)
			}
		}
	})
	t.Run("operational endpoints", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
			if res, body := call(t, "GET", "http://"+n.addr+p, nil); res.StatusCode != 200 {
				t.Errorf("GET %s = %d %s", p, res.StatusCode, body)
			}
		}
	})
}

// Every route the notifier registers is in the document for the notifier,
// and every operation the document gives the notifier is served.
func TestContractNotifierRoutes(t *testing.T) {
	d := contractDoc(t)
	want := d.Routes(contract.Notifier)
	// The stream's routes, as streams.routes registers them; the two
	// without a method are the catch-alls (405 on the stream's path, 404
	// anywhere else) the document describes.
	rec := &patterns{mux: http.NewServeMux()}
	(&streams{}).routes(rec)
	var got []string
	for _, p := range rec.seen {
		if method, _, ok := strings.Cut(p, " "); ok && method != "" {
			got = append(got, p)
		}
	}
	for _, p := range got {
		if !slices.Contains(want, p) {
			t.Errorf("the notifier serves %s, which the OpenAPI document (api/openapi.yaml) lacks", p)
		}
	}
	// Every documented operation reaches a route of its own, on the mux
	// the notifier serves (its stream's routes beside opshttp's).
	w := newWorld(t)
	n := w.start()
	for _, r := range want {
		method, path, _ := strings.Cut(r, " ")
		path = strings.NewReplacer("{queue}", w.queue, "{ticket}", w.join(9, "dave")).Replace(path)
		req, _ := http.NewRequest(method, "http://"+n.addr+path, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		res, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			t.Errorf("%s: %v", r, err)
			continue
		}
		res.Body.Close()
		cancel()
		if res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusMethodNotAllowed {
			t.Errorf("the OpenAPI document gives the notifier %s, which it answers %d", r, res.StatusCode)
		}
	}
}

// patterns records the patterns a router is given.
type patterns struct {
	mux  *http.ServeMux
	seen []string
}

func (p *patterns) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	p.seen = append(p.seen, pattern)
	p.mux.HandleFunc(pattern, h)
}

func (p *patterns) Handler(r *http.Request) (http.Handler, string) { return p.mux.Handler(r) }
