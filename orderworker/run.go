package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"usher/internal/adaptive"
	"usher/internal/bus"
	"usher/internal/config"
	"usher/internal/event"
	"usher/internal/opshttp"
	"usher/internal/orders"
	"usher/internal/paybreaker"
	"usher/internal/service"
	"usher/internal/waitqueue/claims"
)

// run wires the order worker and works until ctx ends.
func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	return runWith(ctx, getenv, stdout, hooks{})
}

// runWith is run with test hooks: it opens the order store and the
// service's connections, binds the consumer, builds the worker, and runs
// every long-lived piece under one errgroup until ctx ends or one crashes.
func runWith(ctx context.Context, getenv func(string) string, stdout io.Writer, h hooks) error {
	s, err := loadSettings(config.New(getenv))
	if err != nil {
		return err
	}
	m := newMetrics()
	db, err := openStore(ctx, s, m)
	if err != nil {
		return err
	}
	defer db.Close()
	d, err := service.Open(ctx, s.Settings, "orderworker", stdout)
	if err != nil {
		return err
	}
	defer d.Close()
	d.Queues.OnRetire(m.forget)
	cons, err := bindConsumer(ctx, s.NATS, d.NC, d.JS, d.Log, s.ackWait, 4*s.concurrency)
	if err != nil {
		return err
	}
	m.reg.MustRegister(bus.NewLagCollector(event.StreamOrders, consumerName, cons, time.Second), opshttp.RedisPools(d.Redis))
	records := orders.NewRecords(d.Redis)
	w := newWorker(s, d, db, records, m, h)

	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	mux := opshttp.Mux(m.reg, d.Ready(db.Ping))
	d.Log.Info("orderworker running", "addr", ln.Addr().String(), "nats", s.NATS.URLs, "payment", s.paymentURL)

	ctx, crash := context.WithCancelCause(ctx)
	defer crash(nil)
	// Work in hand outlives ctx by the shutdown bound, or not at all after
	// a crash.
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	c := newConsumer(d, w, cons, s.concurrency, func(err error) { stopWork(); crash(err) })
	keeper := &recordKeeper{log: d.Log, store: db, records: records, now: d.Clock.Now, every: recordsCheckEvery}

	g, gctx := errgroup.WithContext(ctx)
	d.Go(gctx, g)
	// Once ctx ends, the orders still worked on (the drain) make their
	// line calls straight to Redis (see RunBatches).
	g.Go(func() error { return d.Line.RunBatches(gctx, 2) })
	g.Go(func() error { return c.Run(gctx, workCtx, cons) })
	g.Go(func() error { return c.feed.Run(gctx) })
	g.Go(func() error { return keeper.Run(gctx) })
	g.Go(func() error { return opshttp.Serve(gctx, ln, mux, s.Shutdown) })
	g.Go(func() error { return opshttp.ServeProfiles(gctx, s.Profiles) })
	g.Go(func() error {
		<-gctx.Done()
		time.AfterFunc(s.Shutdown, stopWork) // the bound on draining
		return nil
	})
	err = g.Wait()
	if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && err == nil {
		err = cause
	}
	return err
}

// openStore opens the order store and brings its schema up to date. The
// pool stays at the seed's 40, but the order statements go in batches, one
// batch in flight (orders.Options.MaxBatch), or with USHER_ORDER_BATCH=1
// each alone, a few at once (orders.Options.MaxWriters): on a hot SKU more
// would only queue on the stock row's lock while holding a connection.
func openStore(ctx context.Context, s settings, m *metrics) (*orders.Store, error) {
	db, err := orders.Open(s.databaseURL, orders.Options{MaxConns: int32(s.dbPool), MaxWriters: s.dbWriters, MaxBatch: s.dbBatch,
		Hold: m.observeHold, HoldOf: noteHold})
	if err != nil {
		return nil, err
	}
	if err := db.Migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// newWorker builds the worker on the service's connections: the payment
// client behind its breaker, the order records, and the line's calls,
// batched — each order's line calls (redeem, placed, count, release) are
// single script calls, and with hundreds of orders in flight batching
// coalesces the concurrent ones into pipelines, as the gateway's joins and
// polls. A test's hooks may replace the admission record.
func newWorker(s settings, d *service.Deps, db *orders.Store, records *orders.Records, m *metrics, h hooks) *worker {
	br := newBreaker(d.Log, paybreaker.New(d.Redis), s.breakerOpen, m.breaker.Set)
	pay := newPayments(s.paymentURL, s.paymentTimeout, s.concurrency, br, func(o string) { m.payments.WithLabelValues(o).Inc() })
	pay.timed = m.observePayment
	d.Line.EnableBatching()
	w := &worker{
		log: d.Log, store: db, records: records, line: claims.New(d.Line),
		queues: d.Queues, events: d.JS, breaker: br, lookupGrace: s.lookupGrace,
		admissions: &streamAdmissions{js: d.JS},
		pay:        pay,
		now:        d.Clock.Now,
		deadline:   s.orderDeadline,
		wait:       s.breakerOpen / 2,
		hooks:      h,
		metrics:    m,
	}
	if h.admissions != nil {
		w.admissions = h.admissions
	}
	return w
}

// newConsumer builds the consumer that hands the worker its orders, at
// most concurrency at once, and feeds what each order cost to the queues
// whose admission is adaptive. crash ends the worker: the work in hand, then
// the service.
func newConsumer(d *service.Deps, w *worker, cons jetstream.Consumer, concurrency int, crash func(error)) *consumer {
	c := &consumer{log: d.Log, w: w, ackWait: cons.CachedInfo().Config.AckWait, sem: make(chan struct{}, concurrency),
		crash: crash}
	c.feed = newWindowFeed(adaptive.NewStore(d.Redis), d.Queues, d.Log)
	return c
}
