package main

import (
	"math"
	"strings"
	"sync"
	"time"

	"usher/internal/catalog"
	"usher/internal/shopper"
	"usher/internal/waitqueue"
)

// view is what a position event says.
type view struct {
	position, waiting int64
	eta               int64
	etaKnown          bool
}

// ending is a stream's last event: "expired", or "closed" with a reason.
type ending struct {
	event, reason string
	// abandoned: closed (left) because the shopper was gone for the
	// queue's abandonAfterSeconds, as a poll's LEFT says with reason
	// abandoned (see closedData).
	abandoned bool
	// expiresAt is when an expired token ran out, as the line read after it
	// holds it (zero: not known), for a stream that never saw it admitted.
	expiresAt time.Time
}

// client is one open stream as the hub sees it. The hub writes its state;
// the stream goroutine reads it when woken.
type client struct {
	queue string
	seq   uint64
	wake  chan struct{} // capacity 1: a pending wake-up absorbs later ones

	mu   sync.Mutex
	rank int64 // 0-based rank when base was read
	base int64 // the queue's admittedTotal at that read; -1: not read yet
	view view
	// owed: view changed since the stream was last woken for it, at
	// position tick toldAt (see advance).
	owed   bool
	toldAt int64
	// adm is the client's admission as the line holds it (read from
	// Redis, never taken from an event): the token is minted from it.
	adm *waitqueue.Entry
	// stale: an admission or a leave event named this client's entry; the
	// stream reads the line afresh before it says anything more. left: it
	// was a leave (see stream.readLine).
	stale, left bool
	// stock is the queue's stock state and SKUs with units left, as last
	// read ("" while the queue does not follow stock).
	stock stockView
	// pre: the client waits in a scheduled drop's pre-queue (no place
	// until the draw); opensAt is when the drop opens.
	pre     bool
	opensAt time.Time
	// notice is what the operators tell the line (zero: nothing).
	notice catalog.Notice
	end    ending
}

// stockView is what a stock event says.
type stockView struct {
	state string
	skus  string // comma-separated
}

// setStock records the queue's stock as read, and wakes the stream when
// it changed for a shopper still waiting.
func (c *client) setStock(state string, skus []string) {
	if state == waitqueue.StockUnknown {
		return
	}
	s := stockView{state: state, skus: strings.Join(skus, ",")}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s != c.stock && c.adm == nil && c.end.event == "" {
		c.stock = s
		c.signal()
	}
}

// stockState is the stock as last read.
func (c *client) stockState() stockView {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stock
}

func newClient(q string, seq uint64) *client {
	return &client{queue: q, seq: seq, wake: make(chan struct{}, 1), base: -1, toldAt: math.MinInt32}
}

// signal wakes the stream goroutine without ever blocking; called with c.mu held.
func (c *client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// state is a copy of what the stream needs.
func (c *client) state() (view, *waitqueue.Entry, ending) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view, c.adm, c.end
}

// admit records the client's admission as the line holds it (the first
// one wins: it is one token), and the line's length as that same read
// found it: what the shopper is told until readyAt (stream.untilReady)
// counts that line, never the length an earlier read found, from before
// the admission took the shopper out.
func (c *client) admit(e waitqueue.Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adm == nil && c.end.event == "" {
		c.adm = &e
		c.view = view{position: 1, waiting: e.Waiting, etaKnown: true}
		c.signal()
	}
}

// recheck asks the stream to read the line afresh: an event says
// something changed, and only the line is believed.
func (c *client) recheck() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adm == nil && c.end.event == "" {
		c.stale = true
		c.signal()
	}
}

// leaving asks the stream to read the line afresh, whatever the client's
// state: a leave event named its entry, and the line says how it ended.
func (c *client) leaving() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end.event == "" {
		c.stale, c.left = true, true
		c.signal()
	}
}

// takeStale reports (and clears) whether the stream must read the line,
// and whether a leave is why.
func (c *client) takeStale() (stale, left bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stale, left = c.stale, c.left
	c.stale, c.left = false, false
	return stale, left
}

// close ends a waiting client's stream with reason. An admitted shopper
// keeps their token whatever happens to the queue.
func (c *client) close(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.adm == nil && c.end.event == "" {
		c.end = ending{event: "closed", reason: reason}
		c.signal()
	}
}

// finish ends the stream whatever the client's state.
func (c *client) finish(e ending) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end.event == "" {
		c.end = e
		c.signal()
	}
}

// wantsRank reports whether the next Ranks read should include this client:
// it is still waiting and either has no rank yet or is due for a resync.
func (c *client) wantsRank(due bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.adm == nil && c.end.event == "" && !c.pre && (c.base < 0 || due)
}

// setNotice records the queue's notice (nil: none) and wakes the stream
// when it changed.
func (c *client) setNotice(n *catalog.Notice) {
	var v catalog.Notice
	if n != nil {
		v = *n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v != c.notice {
		c.notice = v
		c.signal()
	}
}

// currentNotice is the notice as last set.
func (c *client) currentNotice() catalog.Notice {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.notice
}

// waiting reports whether the client still waits (in line or in a
// pre-queue): its shopper is there while its stream is.
func (c *client) waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.adm == nil && c.end.event == ""
}

// preQueued records that the client waits in the pre-queue.
func (c *client) preQueued(opensAt time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pre && c.end.event == "" {
		c.pre, c.opensAt = true, opensAt
		c.signal()
	}
}

// drawn ends the pre-queue: the next position tick reads the client's
// place from the line.
func (c *client) drawn() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pre, c.base = false, -1
}

// preQueue says whether the client waits in the pre-queue, and until when.
func (c *client) preQueue() (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pre, c.opensAt
}

// rebase sets the client's exact rank, read together with admittedTotal.
func (c *client) rebase(rank, admittedTotal int64) {
	c.mu.Lock()
	c.rank, c.base = rank, admittedTotal
	c.mu.Unlock()
}

// unrank forgets the client's rank: a read found it out of line. Until a
// read finds it in line again its place is not derived from that rank
// (see advance), and every tick asks for it (see wantsRank).
func (c *client) unrank() {
	c.mu.Lock()
	c.base = -1
	c.mu.Unlock()
}

// positionEvery is how many position ticks apart a waiting client at
// position p is told its place: every tick within the first thousand
// places, one tick more per thousand further back, at most every five
// (the poll's longest pause: see the gateway's pollAfter).
//
// Far back, a place told every second is noise that scrolls faster than it
// can be read — and at 19,000 streams it was 19,000 writes a second, with
// as many wake-ups and reads on the shoppers' side, competing with the
// READYs the line is waiting for. With this cadence a tick tells at most
// about 2,300 clients in the first 5,000 places plus a fifth of the rest.
func positionEvery(p int64) int64 {
	return min(max((p+999)/1000, 1), 5)
}

// advance derives the position from the queue's admissions since the rank
// was read, and wakes the stream when what it would say has changed and
// the client is due to hear it at tick (see positionEvery). A change not
// told yet is owed: it is told at the first tick the client is due, even
// if nothing changes after it.
func (c *client) advance(admittedTotal, waiting int64, rate float64, tick int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := c.view
	v.waiting = waiting
	switch {
	case c.adm != nil:
		v.position = 1
	case c.base >= 0:
		v.position = max(c.rank+1-(admittedTotal-c.base), 1)
	}
	if c.adm != nil {
		v.eta, v.etaKnown = 0, true
	} else {
		v.eta, v.etaKnown = waitqueue.ETA(v.position, rate)
	}
	if v != c.view {
		c.view = v
		c.owed = true
	}
	if c.owed && (c.adm != nil || tick-c.toldAt >= positionEvery(v.position)) {
		c.owed, c.toldAt = false, tick
		c.signal()
	}
}

// apply takes the state of a fresh read of the client's entry.
func (c *client) apply(e waitqueue.Entry) {
	c.setStock(e.Stock, e.SKUs)
	switch e.Status {
	case waitqueue.PreQueued:
		// The hub says when the draw happened; nothing else to tell till then.
		return
	case waitqueue.Waiting, waitqueue.Unknown:
		c.mu.Lock()
		var v view
		v.position, v.waiting, v.eta, v.etaKnown = shopper.InLine(e) // as a poll is told
		if c.base < 0 && v != c.view {
			c.view = v
			c.signal()
		}
		c.mu.Unlock()
	case waitqueue.Admitted:
		c.admit(e)
	case waitqueue.Expired, waitqueue.Gone:
		c.finish(ending{event: "expired", expiresAt: e.ExpiresAt})
	case waitqueue.Used:
		c.finish(ending{event: "closed", reason: "used"})
	case waitqueue.Left:
		c.finish(ending{event: "closed", reason: "left", abandoned: e.Reason == waitqueue.ReasonAbandoned})
	}
}
