package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/shopper"
	"usher/internal/waitqueue"
)

// lineReader is the part of the Redis waiting line the notifier reads —
// and the one write its Redis user may make, the presence of the shoppers
// whose streams it holds (package redisacl). A line.Line is one.
type lineReader interface {
	Poll(ctx context.Context, q string, seq uint64) (waitqueue.Entry, error)
	Ranks(ctx context.Context, q string, seqs []uint64) (waitqueue.Ranks, error)
	Present(ctx context.Context, q string, seqs []uint64, now time.Time) error
}

// queueStates is the part of the catalog the notifier reads.
type queueStates interface {
	Get(name string) (catalog.Config, bool)
}

// hub knows every client this notifier holds and tells each what changed.
// It never writes to a connection: it updates a client's state under the
// client's own lock and wakes its stream goroutine with a non-blocking send,
// so a slow or dead client can delay nobody but itself.
//
// Admissions arrive once per notifier, on one NATS subscription to
// usher.live.admitted.* (what USHER_ADMISSIONS republishes) shared by every
// queue and client (see onAdmitted); each is routed to the clients holding
// that sequence by a map lookup.
//
// Positions are computed in bulk. Once per tick (a second), for each queue
// with clients, one atomic Redis round trip (line.Line.Ranks) reads the
// queue's admission count and the exact rank of the clients due for a
// resync: new ones, plus a rotating slice of at most resyncPerTick, so
// that every client is re-read every n/resyncPerTick ticks. Between
// resyncs a client's position is derived: admission is FIFO, so every
// admission since its rank was read happened ahead of it, and
//
//	position = rank + 1 - (admittedTotal - admittedTotal at that read)
//
// Shoppers who leave from ahead are not seen until the next resync, so the
// derived position errs on the long side, never the short one. The cost per
// queue and tick is one round trip with at most resyncPerTick ranks (and
// the new clients'), whatever the number of clients: the queue's Redis
// shard does the same work a tick for 1,000 streams as for 100,000, and
// the correction for leaves comes later the more clients there are; the
// cost per client is a subtraction.
//
// A client whose resync finds it no longer waiting gets one Poll: that is how
// an admission whose event this notifier missed (a NATS reconnect, a slow
// subscription) still reaches its shopper.
//
// A shopper whose stream this notifier holds is present (see the queue's
// abandonAfterSeconds): every quarter of that time (at most a minute) one
// command per queue records all of its waiting clients present — not a
// write per client per second.
type hub struct {
	log     *slog.Logger
	line    lineReader
	queues  queueStates
	now     func() time.Time
	timing  timing
	metrics *metrics

	ticks int64 // position ticks so far; only Run's goroutine uses it

	mu    sync.Mutex
	rooms map[string]*room
	// streams is how many streams hold a place (hold): a count of its own
	// because a stream registers its client only once its ticket is
	// checked, and a burst of opens all checked against the registered
	// clients before any registered would pass the bound together.
	streams int
}

// room is the clients of one queue.
type room struct {
	clients []*client
	index   map[*client]int
	bySeq   map[uint64][]*client
	cursor  int       // where the next resync slice starts
	present time.Time // when its waiting clients were last recorded present
}

// presenceEvery is how often a queue's waiting clients are recorded
// present: a quarter of its abandonAfterSeconds, at most a minute.
func presenceEvery(cfg catalog.Config) time.Duration {
	return min(cfg.AbandonAfter()/4, time.Minute)
}

// maxPollsPerTick bounds the Polls one queue's tick spends on clients that
// left the line, so a burst of them cannot stall the tick.
const maxPollsPerTick = 256

func newHub(log *slog.Logger, l lineReader, queues queueStates, now func() time.Time, t timing, m *metrics) *hub {
	return &hub{log: log, line: l, queues: queues, now: now, timing: t, metrics: m, rooms: map[string]*room{}}
}

// hold takes a place for one more stream, or reports false when max
// streams hold one already (max 0: no bound). Checking and taking are one
// step, so the bound holds under any burst. The stream gives its place
// back with release.
func (h *hub) hold(max int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if max > 0 && h.streams >= max {
		return false
	}
	h.streams++
	return true
}

// release gives back a place hold took.
func (h *hub) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.streams--
}

// register adds c to its queue's room.
func (h *hub) register(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rooms[c.queue]
	if r == nil {
		r = &room{index: map[*client]int{}, bySeq: map[uint64][]*client{}}
		h.rooms[c.queue] = r
	}
	r.index[c] = len(r.clients)
	r.clients = append(r.clients, c)
	r.bySeq[c.seq] = append(r.bySeq[c.seq], c)
}

// unregister removes c; the room goes when its last client does.
func (h *hub) unregister(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rooms[c.queue]
	if r == nil {
		return
	}
	i, ok := r.index[c]
	if !ok {
		return
	}
	last := len(r.clients) - 1
	r.clients[i] = r.clients[last]
	r.index[r.clients[i]] = i
	r.clients[last] = nil
	r.clients = r.clients[:last]
	delete(r.index, c)
	same := r.bySeq[c.seq]
	for j, o := range same {
		if o == c {
			same = append(same[:j], same[j+1:]...)
			break
		}
	}
	if len(same) == 0 {
		delete(r.bySeq, c.seq)
	} else {
		r.bySeq[c.seq] = same
	}
	if len(r.clients) == 0 {
		delete(h.rooms, c.queue)
	}
}

// clientsOf returns the clients holding seq in q.
func (h *hub) clientsOf(q string, seq uint64) []*client {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.rooms[q]; r != nil {
		return append([]*client(nil), r.bySeq[seq]...)
	}
	return nil
}

// onAdmitted wakes the clients of the admitted entry: each reads its
// entry from the line and is READY from what the line holds. The event
// itself mints nothing (see package shopper).
func (h *hub) onAdmitted(a event.Admitted) {
	h.metrics.eventLag.Observe(max(h.now().Sub(a.ReadyAt), 0).Seconds())
	for _, c := range h.clientsOf(a.Queue, a.Seq) {
		c.recheck()
	}
}

// onConfig hears every change of a queue's configuration: a queue that
// closed (sold out, say) ends its waiting clients' streams at once, not at
// the next position tick, and a notice reaches every client at once.
//
// A drop whose pre-queue was drawn has every client's place read at the
// next position tick: the pre-queued learn their place at once.
func (h *hub) onConfig(cfg catalog.Config) {
	drawn := cfg.Drawn()
	h.mu.Lock()
	var all []*client
	if r := h.rooms[cfg.Name]; r != nil {
		all = append(all, r.clients...)
	}
	h.mu.Unlock()
	for _, c := range all {
		c.setNotice(cfg.Notice)
		switch {
		case cfg.State == catalog.StateClosed:
			c.close(shopper.ClosedReason(cfg))
		case drawn:
			c.drawn()
		}
	}
}

// onLeft wakes the clients of an entry a leave event named, READY ones
// too: each reads the line until it says how the entry ended (see
// stream.readLine). Without it a READY shopper who left heard nothing
// until their token's expiry, and a waiting one until the next resync.
func (h *hub) onLeft(q string, seq uint64) {
	for _, c := range h.clientsOf(q, seq) {
		c.leaving()
	}
}

// onUsed ends the streams of the entry whose token became a final order.
func (h *hub) onUsed(q string, seq uint64) {
	for _, c := range h.clientsOf(q, seq) {
		c.finish(ending{event: "closed", reason: "used"})
	}
}

// Run recomputes positions every tick until ctx ends.
func (h *hub) Run(ctx context.Context) error {
	t := time.NewTicker(h.timing.positions)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		h.mu.Lock()
		names := make([]string, 0, len(h.rooms))
		total := 0
		for q, r := range h.rooms {
			names = append(names, q)
			total += len(r.clients)
		}
		h.mu.Unlock()
		h.ticks++
		p := pacer{tick: h.ticks, pause: h.timing.positions / 2 / time.Duration(max(total/wakeSlice, 1))}
		for _, q := range names {
			h.refresh(ctx, q, &p)
		}
	}
}

// wakeSlice is how many clients a position tick tells at once.
//
// A tick that told every client together would wake every stream
// goroutine at once: at 19,000 streams, the admissions handler and every
// READY woken meanwhile would wait behind 19,000 position writes in the
// scheduler's run queues — READY late by the better part of a second on a
// busy host. So a tick tells its clients wakeSlice at a time, spread over
// half the interval; positions are a moment older for the last slices (they
// err long, never short: see hub).
const wakeSlice = 256

// pacer is one position tick: its number (see positionEvery), and its
// wake-ups spread with a pause before every slice but the first.
type pacer struct {
	tick  int64
	pause time.Duration
	told  int
}

// next waits, if a slice was told already, before the next one; false
// when ctx ended.
func (p *pacer) next(ctx context.Context) bool {
	p.told++
	if p.told == 1 || p.pause <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(p.pause)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// reportPresent records the queue's waiting clients present if it is time.
func (h *hub) reportPresent(ctx context.Context, q string, r *room, all []*client, every time.Duration) {
	now := h.now()
	h.mu.Lock()
	due := now.Sub(r.present) >= every
	if due {
		r.present = now
	}
	h.mu.Unlock()
	if !due {
		return
	}
	seqs := make([]uint64, 0, len(all))
	for _, c := range all {
		if c.waiting() {
			seqs = append(seqs, c.seq)
		}
	}
	if err := h.line.Present(ctx, q, seqs, now); err != nil && ctx.Err() == nil {
		h.log.Warn("record present shoppers", "queue", q, "err", err)
	}
}

// refresh is one queue's tick: closed queues end their waiting clients;
// open ones get new positions from one Ranks round trip.
func (h *hub) refresh(ctx context.Context, q string, p *pacer) {
	r, all, resync := h.clientsToRefresh(q)
	if r == nil {
		return
	}
	cfg, ok := h.queues.Get(q)
	if ok && cfg.State == catalog.StateClosed {
		for _, c := range all {
			c.close(shopper.ClosedReason(cfg))
		}
		return
	}
	if ok && cfg.AbandonAfter() > 0 {
		h.reportPresent(ctx, q, r, all, presenceEvery(cfg))
	}
	var ask []*client
	var seqs []uint64
	for i, c := range all {
		if c.wantsRank(resync.has(i)) {
			ask = append(ask, c)
			seqs = append(seqs, c.seq)
		}
	}
	rk, err := h.line.Ranks(ctx, q, seqs)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("read positions", "queue", q, "err", err)
		}
		return
	}
	gone, isGone := rebase(ask, rk)
	if !advance(ctx, p, all, isGone, rk) {
		return
	}
	h.pollGone(ctx, q, gone)
}

// resyncSlice is the part of a room's n clients, by index, whose ranks are
// read again this tick: size of them from from, wrapping around.
type resyncSlice struct{ from, size, n int }

func (s resyncSlice) has(i int) bool { return (i-s.from+s.n)%s.n < s.size }

// clientsToRefresh is queue q's room (nil: none) and its clients, and
// moves the room's cursor past the slice resynced this tick: at most
// resyncPerTick clients, so every client is resynced once in
// n/resyncPerTick ticks.
func (h *hub) clientsToRefresh(q string) (*room, []*client, resyncSlice) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rooms[q]
	if r == nil {
		return nil, nil, resyncSlice{}
	}
	all := append([]*client(nil), r.clients...)
	n := len(all)
	s := resyncSlice{from: r.cursor % n, size: min(n, h.timing.resyncPerTick), n: n}
	r.cursor = (s.from + s.size) % n
	return r, all, s
}

// rebase gives the clients asked their ranks, and returns those read out
// of line (left, admitted, pre-queued still…) as gone. Their rank is no
// place any more: they are told nothing derived from it — a shopper who
// left heard their old place, of the shorter line, just before closed —
// and are asked again every tick until a Poll says what became of them.
func rebase(ask []*client, rk waitqueue.Ranks) (gone []*client, isGone map[*client]bool) {
	for i, c := range ask {
		if rk.Rank[i] >= 0 {
			c.rebase(rk.Rank[i], rk.AdmittedTotal)
			continue
		}
		c.unrank()
		gone = append(gone, c)
		if isGone == nil {
			isGone = map[*client]bool{}
		}
		isGone[c] = true
	}
	return gone, isGone
}

// advance moves every client not gone on to the line as rk tells it, a
// wakeSlice at a time paced by p; false when ctx ended.
func advance(ctx context.Context, p *pacer, all []*client, isGone map[*client]bool, rk waitqueue.Ranks) bool {
	for i := 0; i < len(all); i += wakeSlice {
		if !p.next(ctx) {
			return false
		}
		for _, c := range all[i:min(i+wakeSlice, len(all))] {
			if isGone[c] {
				continue
			}
			c.advance(rk.AdmittedTotal, rk.Waiting, rk.Rate, p.tick)
			c.setStock(rk.Stock, rk.SKUs)
		}
	}
	return true
}

// pollGone reads what became of up to maxPollsPerTick gone clients.
func (h *hub) pollGone(ctx context.Context, q string, gone []*client) {
	for i, c := range gone {
		if i == maxPollsPerTick {
			break
		}
		e, err := h.line.Poll(ctx, q, c.seq)
		if err != nil {
			return
		}
		c.apply(e)
	}
}
