package admin

import (
	"bufio"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/orders"
	"usher/internal/problem"
	"usher/internal/waitqueue"
)

// The ops dashboard: a page, a stylesheet and a script, embedded like the
// waiting room (no build step, nothing to deploy).
//
// A browser cannot put an Authorization header on a page navigation or an
// EventSource, so the page itself is public and holds no data: it asks for
// the admin token once (kept in sessionStorage), then reads
// GET /v1/admin/ops/stream with fetch() and a streaming reader, which can
// carry the header.
//
//go:embed web/ops.html web/ops.css web/ops.js
var opsWeb embed.FS

// opsAssets maps the dashboard's static files to their content types.
var opsAssets = map[string]string{
	"ops.css": "text/css; charset=utf-8",
	"ops.js":  "text/javascript; charset=utf-8",
}

// MaxStreams bounds concurrent dashboard streams. fasthttp cannot tell
// a handler that its client left until a write to it fails, so each
// stream holds a goroutine and a connection for up to one interval after
// its tab is closed. That is nothing for a handful of ops dashboards; it
// would be a lot for 20,000 shoppers, which is why shoppers' streams live
// in the notifier, on net/http.
const MaxStreams = 32

// Lister lists the catalog's queues.
type Lister interface {
	List() []catalog.Config
}

// Figures reads a queue's live figures from the line.
type Figures interface {
	Stats(ctx context.Context, q string) (waitqueue.Stats, error)
}

// Breaker says whether the shared payment breaker is open.
type Breaker interface {
	Open(ctx context.Context) (bool, error)
}

// Outcomes reads a queue's finished orders by final status.
type Outcomes interface {
	Outcomes(ctx context.Context, queue string) (map[orders.Status]int64, error)
}

// Difficulties tells a queue's proof-of-work difficulty now (package door).
type Difficulties interface {
	Difficulty(ctx context.Context, cfg catalog.Config, now time.Time) (int, error)
}

// DashboardDeps are what the dashboard is built from: what it reads
// besides the catalog and the line. Zero values work: no breaker reads as
// closed, no outcomes as none.
type DashboardDeps struct {
	Queues       Lister
	Line         Figures
	Difficulties Difficulties
	Breaker      Breaker
	Outcomes     Outcomes
	Limits       Limits // nil: adaptive queues show no limit
	// Sold reads the units sold, shared among every viewer (a SoldCache);
	// nil: no sold figures.
	Sold     Sales
	Interval time.Duration // between stream events; 0: one second
	// Slots holds one token per open stream; its capacity bounds them
	// (MaxStreams).
	Slots chan struct{}
	// WriteLimit bounds each write of a stream, as the server's write
	// timeout bounds one answer.
	WriteLimit time.Duration
	Now        func() time.Time
	Log        *slog.Logger
}

// Dashboard serves the ops dashboard and its live figures. It is safe for
// concurrent use.
type Dashboard struct {
	queues       Lister
	line         Figures
	difficulties Difficulties
	breaker      Breaker
	outcomes     Outcomes
	limits       Limits
	sold         Sales
	interval     time.Duration
	slots        chan struct{}
	writeLimit   time.Duration
	now          func() time.Time
	log          *slog.Logger
}

// NewDashboard returns the dashboard of deps.
func NewDashboard(deps DashboardDeps) *Dashboard {
	d := &Dashboard{queues: deps.Queues, line: deps.Line, difficulties: deps.Difficulties, breaker: deps.Breaker,
		outcomes: deps.Outcomes, limits: deps.Limits, sold: deps.Sold, interval: deps.Interval, slots: deps.Slots,
		writeLimit: deps.WriteLimit, now: deps.Now, log: deps.Log}
	if d.interval <= 0 {
		d.interval = time.Second
	}
	return d
}

// SoldEvery is how often the dashboard reads each queue's units sold from
// PostgreSQL, however many operators watch it: the sum runs over the
// queue's PAID orders (some 30 ms for a queue of 100,000), and each open
// dashboard asks for a snapshot every second.
const SoldEvery = time.Second

// SoldCache shares one read of a queue's units sold among the dashboard's
// viewers: at most one query per queue per every. A failed read is
// shared too (the sold figures then show as unknown until the next one),
// so a database in trouble is not asked harder by more viewers; a read
// cut short by its own caller's leaving is not.
type SoldCache struct {
	src   Sales
	now   func() time.Time
	every time.Duration

	mu   sync.Mutex // held across a read: the viewers that come meanwhile wait for it
	last map[string]soldRead
}

type soldRead struct {
	at   time.Time
	sold map[string]int64
	err  error
}

// NewSoldCache shares src's reads, each for every.
func NewSoldCache(src Sales, now func() time.Time, every time.Duration) *SoldCache {
	return &SoldCache{src: src, now: now, every: every, last: map[string]soldRead{}}
}

// Sold returns queue q's units sold per SKU as read within the last every.
func (s *SoldCache) Sold(ctx context.Context, q string) (map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.last[q]; ok && s.now().Sub(r.at) < s.every {
		return r.sold, r.err
	}
	sold, err := s.src.Sold(ctx, q)
	if err == nil || ctx.Err() == nil {
		s.last[q] = soldRead{at: s.now(), sold: sold, err: err}
	}
	return sold, err
}

// opsQueue is one queue on the dashboard: its configuration, its live
// figures, the ETA of the last shopper in line and its order outcomes.
type opsQueue struct {
	queueView
	// EtaLastSeconds is waiting / the measured admission rate: when the
	// last in line gets in at today's pace. Nil while people wait and
	// nobody is being admitted (no pace to measure).
	EtaLastSeconds *float64                `json:"etaLastSeconds"`
	Orders         map[orders.Status]int64 `json:"orders"`
	// PowDifficulty is the queue's proof-of-work difficulty as this
	// gateway sets it now (nil while its challenge is off).
	PowDifficulty *int `json:"powDifficulty,omitempty"`
}

// opsSnapshot is one `queues` event: every queue at one instant.
type opsSnapshot struct {
	At          time.Time  `json:"at"`
	BreakerOpen bool       `json:"breakerOpen"`
	Queues      []opsQueue `json:"queues"`
}

// snapshot reads every queue's figures, the breaker and the outcomes.
func (d *Dashboard) snapshot(ctx context.Context) (opsSnapshot, error) {
	snap := opsSnapshot{At: d.now().UTC(), Queues: []opsQueue{}}
	if d.breaker != nil {
		open, err := d.breaker.Open(ctx)
		if err != nil {
			return snap, err
		}
		snap.BreakerOpen = open
	}
	for _, cfg := range d.queues.List() {
		q, err := d.queueOf(ctx, cfg)
		if err != nil {
			return snap, err
		}
		snap.Queues = append(snap.Queues, q)
	}
	return snap, nil
}

// queueOf reads queue cfg's figures, adaptive limit, units sold,
// difficulty and order outcomes.
func (d *Dashboard) queueOf(ctx context.Context, cfg catalog.Config) (opsQueue, error) {
	st, err := d.line.Stats(ctx, cfg.Name)
	if err != nil {
		return opsQueue{}, err
	}
	q := opsQueue{queueView: viewOf(cfg, st), Orders: map[orders.Status]int64{}}
	if q.AdaptiveLimit, err = adaptiveOf(ctx, d.limits, cfg); err != nil {
		return opsQueue{}, err
	}
	if d.sold != nil {
		withSold(ctx, d.log, &q.queueView, d.sold)
	}
	switch {
	case st.Waiting == 0:
		q.EtaLastSeconds = new(0.0)
	case st.AdmitRatePerSec > 0:
		q.EtaLastSeconds = new(float64(st.Waiting) / st.AdmitRatePerSec)
	}
	if cfg.Challenge.On() {
		bits, err := d.difficulties.Difficulty(ctx, cfg, d.now())
		if err != nil {
			return opsQueue{}, err
		}
		q.PowDifficulty = &bits
	}
	if d.outcomes != nil {
		if q.Orders, err = d.outcomes.Outcomes(ctx, cfg.Name); err != nil {
			return opsQueue{}, err
		}
	}
	return q, nil
}

// Page serves the dashboard: GET /ops. It is public and holds no data;
// everything it shows comes from the admin API with the token.
func (d *Dashboard) Page(c *fiber.Ctx) error {
	b, err := opsWeb.ReadFile("web/ops.html")
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set("X-Content-Type-Options", "nosniff")
	c.Set("X-Frame-Options", "DENY") // its buttons must not be clickjacked
	c.Set("Referrer-Policy", "no-referrer")
	return c.Send(b)
}

// Asset serves the dashboard's stylesheet and script:
// GET /ops/static/{file}.
func (d *Dashboard) Asset(c *fiber.Ctx) error {
	name := path.Base(httpapi.PathParam(c, "file"))
	typ, ok := opsAssets[name]
	if !ok {
		return problem.New(fiber.StatusNotFound, "not-found", "no such file")
	}
	b, err := opsWeb.ReadFile("web/" + name)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, typ)
	c.Set(fiber.HeaderCacheControl, "no-cache")
	return c.Send(b)
}

// Snapshot answers GET /v1/admin/ops: one snapshot, what the stream
// sends every second. The page polls it when it cannot stream.
func (d *Dashboard) Snapshot(c *fiber.Ctx) error {
	snap, err := d.snapshot(c.UserContext())
	if err != nil {
		return httpapi.LineDown(err)
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(snap)
}

// Stream answers GET /v1/admin/ops/stream: a text/event-stream with one
// `queues` event (an opsSnapshot) per interval, until a write fails (the
// client left) or the server shuts down. A snapshot that cannot be read is
// sent as an `error` event and the stream goes on.
func (d *Dashboard) Stream(c *fiber.Ctx) error {
	select {
	case d.slots <- struct{}{}:
	default:
		p := problem.New(fiber.StatusServiceUnavailable, "too-many-streams",
			"too many ops dashboards are open; this one polls GET /v1/admin/ops instead")
		p.RetryAfter = 10
		return p
	}
	// Captured now: fiber's Ctx is recycled once the handler returns.
	done := c.Context().Done() // closed when the server shuts down
	conn := c.Context().Conn()
	writeLimit := d.writeLimit
	interval := d.interval
	log := d.log

	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set("X-Accel-Buffering", "no") // a proxy must pass each event on at once
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer func() { <-d.slots }()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		fmt.Fprint(w, "retry: 2000\n\n")
		for {
			// The server's write timeout is for one answer; a stream is
			// many, each given the same bound.
			_ = conn.SetWriteDeadline(time.Now().Add(writeLimit))
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			snap, err := d.snapshot(ctx)
			cancel()
			if err != nil {
				log.Warn("ops stream snapshot", "err", err)
				writeEvent(w, "", "error", []byte(`{"detail":"live figures unavailable"}`))
			} else if body, err := json.Marshal(snap); err == nil {
				writeEvent(w, strconv.FormatInt(snap.At.UnixMilli(), 10), "queues", body)
			}
			if err := w.Flush(); err != nil {
				return // the client left
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return nil
}

// writeEvent writes one Server-Sent Event; data is one line of JSON.
func writeEvent(w *bufio.Writer, id, name string, data []byte) {
	if id != "" {
		fmt.Fprintf(w, "id: %s\n", id)
	}
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
}
