package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"usher/internal/catalog"
	"usher/internal/problem"
	"usher/internal/shopper"
	"usher/internal/ticket"
	"usher/internal/waitqueue"
)

// streams serves each shopper's event stream.
type streams struct {
	log     *slog.Logger
	hub     *hub
	line    lineReader
	queues  queueStates
	tickets *ticket.Signer
	epoch   func() string  // the entries stream's identity, as tickets carry it
	keys    shopper.Signer // the minter: see minter
	origins []string       // allowed CORS origins; "*" allows any
	now     func() time.Time
	// earliest is the earliest Redis's time can be now (clock.Synced.Earliest):
	// what READY waits for.
	earliest func() time.Time
	timing   timing
	metrics  *metrics
	// base is the notifier's life: a stream taken over from net/http
	// (detach) ends with it, and detached counts its goroutines until
	// they have. Without a base every stream stays on net/http.
	base     context.Context
	detached sync.WaitGroup
}

// Event payloads.
type (
	positionData struct {
		Position   int64  `json:"position"`
		Waiting    int64  `json:"waiting"`
		ETASeconds *int64 `json:"etaSeconds,omitempty"`
	}
	readyData struct {
		Token     string    `json:"token"`
		ReadyAt   time.Time `json:"readyAt"`
		ExpiresAt time.Time `json:"expiresAt"`
		// The stock of a stock-aware queue, as a READY poll says it.
		Stock string   `json:"stock,omitempty"`
		SKUs  []string `json:"skusAvailable,omitempty"`
	}
	closedData struct {
		Reason string `json:"reason"`
		// Abandoned: left (reason left) because the shopper was gone for
		// the queue's abandonAfterSeconds — a poll's LEFT with reason
		// abandoned. It is a member of its own, not a reason: clients take
		// any reason but used and left for the queue's closing (an
		// operator's closedReason is free text), and would tell an
		// abandoned shopper, who may join again, that the sale closed.
		Abandoned bool `json:"abandoned,omitempty"`
	}
	preQueueData struct {
		OpensAt time.Time `json:"opensAt"`
	}
	stockData struct {
		Stock string   `json:"stock"`
		SKUs  []string `json:"skusAvailable,omitempty"`
	}
	expiredData struct {
		ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	}
)

// appendJSON appends p as encoding/json spells it. Position events are
// most of what a notifier sends (every waiting client, every tick, while the
// line moves); spelled by reflection each one also grew its stream's
// shrunk stack (see minter).
func (p positionData) appendJSON(b []byte) []byte {
	b = strconv.AppendInt(append(b, `{"position":`...), p.Position, 10)
	b = strconv.AppendInt(append(b, `,"waiting":`...), p.Waiting, 10)
	if p.ETASeconds != nil {
		b = strconv.AppendInt(append(b, `,"etaSeconds":`...), *p.ETASeconds, 10)
	}
	return append(b, '}')
}

// routes adds the stream's routes to mux, and the catch-all that answers
// every request no route takes (see unrouted).
func (s *streams) routes(mux router) {
	const path = "/v1/queues/{queue}/tickets/{ticket}/events"
	mux.HandleFunc("GET "+path, s.serve)
	mux.HandleFunc("OPTIONS "+path, s.preflight)
	mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		s.cors(w, r)
		w.Header().Set("Allow", "GET, OPTIONS")
		problem.Write(w, problem.New(http.StatusMethodNotAllowed, "method-not-allowed", "use GET"))
	})
	mux.HandleFunc("/", unrouted(mux))
}

// cors lets pages of the allowed origins (the gateway's waiting-room page,
// a shop's own) open the stream. EventSource sends no credentials, so none
// are allowed.
func (s *streams) cors(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	h := w.Header()
	switch {
	case slices.Contains(s.origins, "*"):
		h.Set("Access-Control-Allow-Origin", "*")
	case origin != "" && slices.Contains(s.origins, origin):
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
	}
}

func (s *streams) preflight(w http.ResponseWriter, r *http.Request) {
	s.cors(w, r)
	h := w.Header()
	h.Set("Access-Control-Allow-Methods", "GET")
	h.Set("Access-Control-Allow-Headers", "Last-Event-ID, Cache-Control")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

// serve streams one ticket's events until the client goes, the stream
// ends (expired, closed, or the token's life is over) or the notifier stops.
//
// An HTTP/1.1 stream is taken over from net/http once its first state is
// known (detach): it then runs on a goroutine of its own, and everything
// net/http kept for the connection while its handler ran — the request,
// two buffered writers and a buffered reader, about 10 KiB, and the
// handler's goroutine — is freed. That is most of what an idle stream
// would cost otherwise, and memory per idle stream, beside a bare
// net/http server's, is one of BENCHMARKS.md's goals.
// Elsewhere (HTTP/2, a test's recorder) the stream runs here.
//
// It is kept small on purpose: the setup (open: the ticket, Redis, the
// first state) happens in a frame that is gone once the stream runs, and
// a stream that stays on net/http's goroutine parks with a shallow stack.
func (s *streams) serve(w http.ResponseWriter, r *http.Request) {
	st := s.open(w, r)
	if st == nil {
		return // answered with a problem
	}
	if r.Method == http.MethodHead {
		// The GET route takes HEAD too: its answer is the stream's header
		// and no body (RFC 9110 §9.3.2). Taken over, the stream wrote its
		// events after the header all the same, and kept the connection
		// open for a client that reads no body.
		s.hub.unregister(st.c)
		s.hub.release()
		w.WriteHeader(http.StatusOK)
		return
	}
	if s.detach(w, r, st) {
		return
	}
	w.WriteHeader(http.StatusOK)
	s.stream(r.Context(), st)
}

// detach takes the stream's connection over from net/http and runs the
// stream on a goroutine of its own until the client goes or base ends. It
// reports false, having done nothing, where the connection cannot be taken
// over (or the streams have no base to end with).
func (s *streams) detach(w http.ResponseWriter, r *http.Request, st *stream) bool {
	if s.base == nil || r.ProtoMajor != 1 {
		return false
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false // not HTTP/1.x underneath: the stream stays on net/http
	}
	st.sse.detach(conn, responseHead(w.Header(), time.Now()))
	ctx, cancel := context.WithCancel(s.base)
	s.detached.Add(2)
	go func() {
		// The client's side of the connection: it sends nothing after its
		// request, so a read returns only when the client goes.
		defer s.detached.Done()
		defer cancel()
		var b [64]byte
		for {
			if _, err := conn.Read(b[:]); err != nil {
				return
			}
		}
	}()
	go func() {
		defer s.detached.Done()
		defer conn.Close()
		defer cancel()
		reserveStack(func() { s.stream(ctx, st) })
	}()
	return true
}

// stackReserve is the stack a taken-over stream's goroutine grows to when
// it connects, and keeps however long it idles. A new goroutine starts
// with a small stack and a garbage collection halves an idle one that uses
// less than a quarter of it; the READY path (the line's answer, the token,
// the write) then grew each stream's stack at the moment its READY was due,
// 19,000 of them within seconds: runtime.copystack and the stack pool's
// lock took 13-25 % of the notifier's CPU. net/http's own goroutine, which
// ran the stream before, had grown in serving the request and kept it.
const stackReserve = 8 << 10

// reserveStack grows the goroutine's stack to stackReserve, then runs f on
// top of a frame that keeps enough of it in use (with the stream's own
// frames, over a quarter) that a garbage collection never shrinks it.
//
//go:noinline
func reserveStack(f func()) {
	var floor [stackReserve / 8]byte
	touch(floor[:])
	growStack()
	f()
	touch(floor[:]) // floor stays in this frame while f runs
}

// growStack has a frame of three quarters of stackReserve: the stack grows
// to stackReserve on calling it.
//
//go:noinline
func growStack() {
	var b [stackReserve * 3 / 4]byte
	touch(b[:])
}

// touch writes to b, so that a frame's array is not optimised away.
//
//go:noinline
func touch(b []byte) { b[len(b)-1]++ }

// responseHead is the status line and header of a taken-over stream's
// response: what net/http would have written for it, except that the
// body ends with the connection (RFC 9112 §6.3: no length, no chunks).
func responseHead(h http.Header, now time.Time) []byte {
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 200 OK\r\n")
	_ = h.Write(&b) // a bytes.Buffer takes every write
	b.WriteString("Date: ")
	b.WriteString(now.UTC().Format(http.TimeFormat))
	b.WriteString("\r\nConnection: close\r\n\r\n")
	return b.Bytes()
}

// stream runs st until it ends, and accounts for it.
func (s *streams) stream(ctx context.Context, st *stream) {
	defer s.hub.release()
	defer s.hub.unregister(st.c)
	s.metrics.connections.Inc()
	defer s.metrics.connections.Dec()
	if err := st.run(ctx); err != nil {
		reason := "dead"
		if err == errSlow {
			reason = "slow"
		}
		s.metrics.dropped.WithLabelValues(reason).Inc()
		s.log.Debug("client dropped", "queue", st.c.queue, "reason", reason, "err", err)
	}
}

// streamsFullRetry is when a client refused for a full notifier may try a
// stream again: long beside a poll's interval, so it polls meanwhile.
const streamsFullRetry = 10 * time.Second

// open checks the ticket, registers its client with the hub, reads its
// entry and starts the response: the stream, or nil when it answered with
// a problem instead. A notifier holding its most streams refuses a new one
// before anything else; the place a stream holds is given back when it
// ends (stream), or here when it does not start.
//
//go:noinline
func (s *streams) open(w http.ResponseWriter, r *http.Request) *stream {
	s.cors(w, r)
	if !s.hub.hold(s.timing.maxStreams) {
		// Shed, not grow: the client polls its ticket meanwhile (the
		// gateway answers polls from Redis alone) and comes back later.
		s.metrics.refused.Inc()
		w.Header().Set("Retry-After", strconv.Itoa(int(streamsFullRetry/time.Second)))
		problem.Write(w, problem.New(http.StatusServiceUnavailable, "too-many-streams",
			"this notifier holds as many streams as it may; poll the ticket, and open the stream again later"))
		return nil
	}
	handedOver := false // once the stream runs, serve gives its place back
	defer func() {
		if !handedOver {
			s.hub.release()
		}
	}()
	cfg, t, ok := s.ticketOf(w, r)
	if !ok {
		return nil
	}
	ctx := r.Context()
	c, e, err := s.registerAndRead(ctx, cfg.Name, t.Seq)
	defer func() {
		if !handedOver {
			s.hub.unregister(c)
		}
	}()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("read ticket state", "queue", cfg.Name, "err", err)
		}
		w.Header().Set("Retry-After", "1")
		problem.Write(w, problem.New(http.StatusServiceUnavailable, "unavailable", "the line could not be read; retry"))
		return nil
	}
	// The configuration as it stands now that c is registered: a change
	// made between the first read and the registration reached the hub
	// before c was in its room (onConfig), so it is read here; any later
	// one reaches c through onConfig.
	if cur, ok := s.queues.Get(cfg.Name); ok {
		cfg = cur
	}
	if !servable(w, cfg, t, e) {
		return nil
	}
	c.apply(e)
	c.setNotice(cfg.Notice)
	if e.Status == waitqueue.PreQueued && cfg.OpensAt != nil && !cfg.Drawn() {
		c.preQueued(*cfg.OpensAt)
	}
	if cfg.State == catalog.StateClosed {
		c.close(shopper.ClosedReason(cfg))
	}

	lastID, resumed := parseLastEventID(r.Header.Get("Last-Event-ID"))
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream

	handedOver = true
	// Write deadlines are on the host's own clock, the one the network
	// stack keeps them by (s.now follows Redis's, which may be minutes off it).
	return &stream{streams: s, sse: newSSEWriter(w, time.Now, s.timing.writeTimeout, lastID), c: c, user: t.User, noticeOwed: resumed}
}

// ticketOf is the request's queue and ticket, or false once it has
// written why there is none: no such queue, a ticket not signed here, of
// another queue, or of a line since reset.
func (s *streams) ticketOf(w http.ResponseWriter, r *http.Request) (catalog.Config, ticket.Ticket, bool) {
	q := r.PathValue("queue")
	cfg, ok := s.queues.Get(q)
	if !ok {
		problem.Write(w, problem.New(http.StatusNotFound, "unknown-queue", "no queue named "+strconv.Quote(q)))
		return catalog.Config{}, ticket.Ticket{}, false
	}
	t, err := s.tickets.Parse(r.PathValue("ticket"))
	if err != nil {
		problem.Write(w, problem.New(http.StatusUnauthorized, "invalid-ticket", "the ticket is not one this queue issued"))
		return catalog.Config{}, ticket.Ticket{}, false
	}
	if t.Queue != cfg.Name {
		problem.Write(w, problem.New(http.StatusNotFound, "ticket-not-found", "the ticket belongs to another queue"))
		return catalog.Config{}, ticket.Ticket{}, false
	}
	if t.Epoch != s.epoch() {
		problem.Write(w, problem.New(http.StatusGone, "ticket-stale", "the line this ticket was for has been reset; join again"))
		return catalog.Config{}, ticket.Ticket{}, false
	}
	return cfg, t, true
}

// registerAndRead registers a client of queue q's entry seq with the hub,
// then reads the entry: registered first, because an admission event that
// lands between the read and the registration would otherwise be lost to
// it. A duplicate join's alias follows the live entry. The client returned
// is registered, even with the error.
func (s *streams) registerAndRead(ctx context.Context, q string, seq uint64) (*client, waitqueue.Entry, error) {
	c := newClient(q, seq)
	s.hub.register(c)
	e, err := s.line.Poll(ctx, q, seq)
	if err == nil && e.Seq != seq && e.Seq != 0 {
		s.hub.unregister(c)
		c = newClient(q, e.Seq)
		s.hub.register(c)
		e, err = s.line.Poll(ctx, q, e.Seq)
	}
	return c, e, err
}

// servable reports whether entry e can be streamed to the ticket's holder,
// or writes why not: it is another user's place, or a pre-queued entry of
// a drop whose schedule this notifier's catalog has not caught up with yet
// (it follows the bucket a moment behind): no place to say, and no
// opening, so the client retries.
func servable(w http.ResponseWriter, cfg catalog.Config, t ticket.Ticket, e waitqueue.Entry) bool {
	if e.User != "" && e.User != t.User {
		problem.Write(w, problem.New(http.StatusNotFound, "ticket-not-found", "no entry of this ticket's user at this place"))
		return false
	}
	if e.Status == waitqueue.PreQueued && cfg.OpensAt == nil {
		w.Header().Set("Retry-After", "1")
		problem.Write(w, problem.New(http.StatusServiceUnavailable, "unavailable", "the queue's schedule is not known here yet; retry"))
		return false
	}
	return true
}

// stream is one connection's loop.
type stream struct {
	*streams
	sse  *sseWriter
	c    *client
	user string

	sent       view
	sentAny    bool
	sentStock  stockView
	sentPre    bool
	sentNotice catalog.Notice
	// noticeOwed: a resumed stream (Last-Event-ID) says the notice at
	// once, {} included, so a page that showed one before it lost the
	// connection takes down a notice removed meanwhile.
	noticeOwed bool
	readySent  bool
	readyAt    *time.Timer
	expiresAt  *time.Timer
	// After a leave event, until leaveBy, the line is read again every
	// rereadIn (growing) while it still holds the entry live: see readLine.
	reread   *time.Timer
	rereadIn time.Duration
	leaveBy  time.Time
}

// leaveWait is how long a stream told of a leave reads the line for it.
// The gateway writes the leave to the line a round trip after it published
// it; when that write fails, the admitter's follower applies the leave from
// the entries stream. A leave the line never takes (the entry had ended
// otherwise, or the gateway's DELETE answered 503 before publishing) has
// the stream go on as the line says.
const leaveWait = 5 * time.Second

// readLine reads the entry afresh and takes what the line holds. After a
// leave event (left) it reads again, sooner then later, until the line
// ends the entry or leaveWait passes: the gateway publishes a leave before
// it writes it to the line (the event is the record), so the first read
// often comes before the write.
func (st *stream) readLine(ctx context.Context, left bool) error {
	if left {
		st.leaveBy, st.rereadIn = time.Now().Add(leaveWait), 0
	}
	e, err := st.line.Poll(ctx, st.c.queue, st.c.seq)
	if err != nil {
		return err
	}
	st.c.apply(e)
	if st.leaveBy.IsZero() || st.reread != nil {
		return nil
	}
	if _, _, end := st.c.state(); end.event != "" || time.Now().After(st.leaveBy) {
		st.leaveBy = time.Time{}
		return nil
	}
	st.rereadIn = min(max(2*st.rereadIn, 20*time.Millisecond), 500*time.Millisecond)
	st.reread = time.NewTimer(st.rereadIn)
	return nil
}

// run sends the current state at once, then whatever changes, until the
// stream ends. It returns an error only for a failed write.
func (st *stream) run(ctx context.Context) error {
	if err := st.sse.retry(st.timing.retry); err != nil {
		return err
	}
	heartbeat := time.NewTicker(st.timing.heartbeat)
	defer heartbeat.Stop()
	defer func() {
		if st.readyAt != nil {
			st.readyAt.Stop()
		}
		if st.expiresAt != nil {
			st.expiresAt.Stop()
		}
		if st.reread != nil {
			st.reread.Stop()
		}
	}()
	for {
		if stale, left := st.c.takeStale(); stale {
			// An admission or a leave event named this entry: read what
			// the line holds, the only thing a token is minted from and
			// the only word on how an entry ended.
			if err := st.readLine(ctx, left); err != nil {
				return nil // the client reconnects and reads it afresh
			}
		}
		done, err := st.push()
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-st.c.wake:
		case <-timerC(st.readyAt):
			st.readyAt = nil
		case <-timerC(st.reread):
			st.reread = nil
			if err := st.readLine(ctx, false); err != nil {
				return nil // the client reconnects and reads it afresh
			}
		case <-timerC(st.expiresAt):
			st.expiresAt = nil
			e, err := st.line.Poll(ctx, st.c.queue, st.c.seq)
			if err != nil {
				return nil // the client reconnects and reads it afresh
			}
			st.c.apply(e)
			if e.Status == waitqueue.Admitted {
				if left := e.ExpiresAt.Sub(st.now()); left > 0 {
					st.expiresAt = time.NewTimer(left + 100*time.Millisecond)
				} else {
					st.c.finish(ending{event: "expired"})
				}
			}
		case <-heartbeat.C:
			if err := st.sse.comment("hb"); err != nil {
				return err
			}
		}
	}
}

// timerC is t's channel, or nil (blocks forever) without a timer.
func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// push sends what the client has not been told yet. READY goes out at
// readyAt, never before: until then an admitted shopper is first in line.
// The notice goes to every live stream, READY ones included, as every
// poll's answer carries it — and before anything else: on a stream that
// opens, fresh or resumed, READY or waiting, it is the first event (see
// pushNotice).
func (st *stream) push() (done bool, err error) {
	if err := st.pushNotice(); err != nil {
		return false, err
	}
	v, adm, end := st.c.state()
	if end.event != "" {
		return true, st.pushEnd(end, adm)
	}
	if adm != nil && !st.readySent {
		if v, err = st.pushAdmitted(*adm, v); err != nil {
			return false, err
		}
	}
	if st.readySent {
		return false, nil // READY is said; only the notice and the end follow
	}
	if pre, opensAt := st.c.preQueue(); pre {
		return false, st.pushPreQueue(opensAt)
	}
	if v.position < 1 {
		// No place yet: a drop that opened, whose line has not placed this
		// shopper although the catalog says drawn (the notifier heard the
		// catalog first, or the admitter redoes a draw Redis lost), reads
		// as an entry without a rank. A place is at least 1: say nothing
		// until the line gives one (a stream open across the opening
		// keeps its pre-queue state meanwhile).
		return false, nil
	}
	if err := st.pushPosition(v); err != nil {
		return false, err
	}
	if adm != nil {
		return false, nil
	}
	return false, st.pushStock()
}

// pushEnd says how the entry ended, the stream's last event: closed with
// its reason, or expired with when the token did (the admission's, or the
// one the line reported with the end).
func (st *stream) pushEnd(end ending, adm *waitqueue.Entry) error {
	var data []byte
	if end.event == "closed" {
		data, _ = json.Marshal(closedData{Reason: end.reason, Abandoned: end.abandoned})
	} else {
		var exp *time.Time
		switch {
		case adm != nil:
			exp = &adm.ExpiresAt
		case !end.expiresAt.IsZero():
			exp = &end.expiresAt
		}
		data, _ = json.Marshal(expiredData{ExpiresAt: exp})
	}
	return st.send(end.event, data)
}

// pushAdmitted sends READY once readyAt has come; before it, it sets a
// timer for readyAt and returns what the shopper is told meanwhile (first
// in line, see untilReady) in place of v.
func (st *stream) pushAdmitted(adm waitqueue.Entry, v view) (view, error) {
	// Never early on Redis's clock, whatever the sync's error: see
	// clock.Synced.Earliest.
	now := st.earliest()
	if !now.Before(adm.ReadyAt) {
		return v, st.ready(adm, now)
	}
	if st.readyAt == nil {
		st.readyAt = time.NewTimer(adm.ReadyAt.Sub(now))
	}
	return st.untilReady(adm, v.waiting, now)
}

// pushPreQueue says, once, that the shopper is in a scheduled drop's
// pre-queue: no place until the draw.
func (st *stream) pushPreQueue(opensAt time.Time) error {
	if st.sentPre {
		return nil
	}
	st.sentPre = true
	data, _ := json.Marshal(preQueueData{OpensAt: opensAt.UTC()})
	return st.send("prequeue", data)
}

// pushPosition sends the shopper's place, the line's length and the ETA
// when any of them changed since the last said (always the first time).
func (st *stream) pushPosition(v view) error {
	if st.sentAny && v == st.sent {
		return nil
	}
	p := positionData{Position: v.position, Waiting: v.waiting}
	if v.etaKnown {
		p.ETASeconds = &v.eta
	}
	data := p.appendJSON(make([]byte, 0, 64))
	st.sent, st.sentAny = v, true
	return st.send("position", data)
}

// pushStock sends the queue's stock, for a shopper still waiting, when it
// changed: whether units are left for them, held by shoppers ahead, or
// gone.
func (st *stream) pushStock() error {
	s := st.c.stockState()
	if s == st.sentStock {
		return nil
	}
	sd := stockData{Stock: s.state}
	if s.skus != "" {
		sd.SKUs = strings.Split(s.skus, ",")
	}
	data, _ := json.Marshal(sd)
	st.sentStock = s
	return st.send("stock", data)
}

// pushNotice tells the operators' notice if the client has not heard it:
// what they tell the line, whatever the shopper's state (a poll's answer
// carries it too), {} when they took it down, and on a resumed stream
// (noticeOwed) at once, {} included.
//
// It goes before the state's own event. A client that acts on ready at
// once — @usher/client's wait resolves with the READY state and closes the
// stream — never reads an event after it: told ready first, it kept the
// notice it had before it lost the connection (a notice taken down
// meanwhile stayed up on its page) and never saw one put up meanwhile.
func (st *stream) pushNotice() error {
	n := st.c.currentNotice()
	if n == st.sentNotice && !st.noticeOwed {
		return nil
	}
	st.sentNotice, st.noticeOwed = n, false
	data := []byte("{}")
	if n.Message != "" {
		data, _ = json.Marshal(n)
	}
	return st.send("notice", data)
}

// untilReady is what an admitted shopper is told until readyAt, as a poll
// of theirs answers it (shopper.Of: first in line, of a line that holds
// them), with the line's length as last read (line): the admission's read,
// or a position tick's since.
func (st *stream) untilReady(adm waitqueue.Entry, line int64, now time.Time) (view, error) {
	cfg, _ := st.queues.Get(st.c.queue)
	adm.Waiting = line
	v, err := shopper.Of(adm, cfg, st.user, now, st.keys)
	if err != nil {
		return view{}, err
	}
	return view{position: v.Position, waiting: v.Waiting, eta: v.ETA, etaKnown: v.ETAKnown}, nil
}

// ready sends READY with the entry token, minted by shopper.Of from the
// admission the line holds, exactly as the gateway's poll does, and the
// stock of a stock-aware queue as the line held it with the admission
// (the page offers only the variants with units left).
func (st *stream) ready(e waitqueue.Entry, now time.Time) error {
	cfg, _ := st.queues.Get(st.c.queue)
	v, err := shopper.Of(e, cfg, st.user, now, st.keys)
	if err != nil {
		return err
	}
	if v.Status != shopper.Ready {
		return fmt.Errorf("admission of %s/%d is %s at READY", st.c.queue, st.c.seq, v.Status)
	}
	data, _ := json.Marshal(readyData{Token: v.Token, ReadyAt: v.ReadyAt.UTC(), ExpiresAt: v.ExpiresAt.UTC(), Stock: v.Stock, SKUs: v.SKUs})
	if err := st.send("ready", data); err != nil {
		return err
	}
	st.readySent = true
	st.metrics.readyLatency.Observe(st.now().Sub(v.ReadyAt).Seconds())
	// Stay until the token's life is over, to say whether it expired.
	st.expiresAt = time.NewTimer(max(v.ExpiresAt.Sub(now), 0) + 100*time.Millisecond)
	return nil
}

func (st *stream) send(name string, data []byte) error {
	if err := st.sse.event(name, data); err != nil {
		return err
	}
	st.metrics.events.WithLabelValues(name).Inc()
	return nil
}
