// Package inflight bounds the joins a gateway answers at once, and moves
// the bound with the time they take.
//
// A fixed bound sized for the rate the stack answers (512 at 10,000
// joins/s is 50 ms of queue) is too large once that rate falls: offered
// three times what it answers, a stack spends much of its CPU refusing
// the excess, answers a fraction of its usual rate, and the joins it takes
// wait in a queue of 512 for seconds. Limit keeps the ceiling but, in a
// window where the joins it let in are slow — more than a tenth of them
// above their target — scales the bound by the target over the time they
// took on average (by nine tenths at most), and raises it again by a
// tenth and one each window they are not: the bound follows the rate the
// stack answers now (a queue of about that rate × the target), the joins
// it takes keep their latency, and once the load falls it is back at the
// ceiling within a few seconds.
//
// The scaling is the gradient of Netflix's concurrency limits: where joins
// take four times their target, a quarter of those in flight is what the
// stack answers in time. A cut of a tenth a window would take twenty
// windows to bring 512 down to 64, and the joins let in meanwhile, at the
// start of an overload, are the ones that wait longest.
package inflight

import (
	"sync"
	"time"
)

const (
	// window is the shortest time between two moves of the bound, and
	// quorum the fewest joins a move is judged on: a handful of joins is
	// no sign either way.
	window = 100 * time.Millisecond
	quorum = 20
	// floor is the lowest the bound falls: a gateway always takes some
	// joins, so it sees when they are fast again.
	floor = 8
)

// Limit is the bound. Its zero value is not usable: see New.
type Limit struct {
	ceiling int
	target  time.Duration // 0: the bound stays at ceiling
	now     func() time.Time

	mu       sync.Mutex
	bound    float64
	inFlight int
	since    time.Time     // the window's start
	done     int           // joins finished in the window
	slow     int           // of them, those that took longer than target
	took     time.Duration // and the time they took, together
}

// New returns a Limit of at most ceiling joins at once (0: none), moved
// by the time joins take against target (0: never moved), read from now.
func New(ceiling int, target time.Duration, now func() time.Time) *Limit {
	return &Limit{ceiling: ceiling, target: target, now: now, bound: float64(ceiling), since: now()}
}

// Take takes a place for a join, or reports that every place is taken.
// A taken place is given back with Done.
func (l *Limit) Take() (started time.Time, ok bool) {
	if l.ceiling <= 0 {
		return time.Time{}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight >= int(l.bound) {
		return time.Time{}, false
	}
	l.inFlight++
	return l.now(), true
}

// Done gives back the place of a join Take let in at started, and counts
// how long it took.
func (l *Limit) Done(started time.Time) {
	if l.ceiling <= 0 {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight--
	if l.target <= 0 {
		return
	}
	took := now.Sub(started)
	l.done++
	l.took += took
	if took > l.target {
		l.slow++
	}
	if l.done < quorum || now.Sub(l.since) < window {
		return
	}
	if l.slow*10 > l.done {
		mean := l.took / time.Duration(l.done)
		l.bound = max(l.bound*min(0.9, float64(l.target)/float64(mean)), float64(min(floor, l.ceiling)))
	} else {
		l.bound = min(l.bound*1.1+1, float64(l.ceiling))
	}
	l.since, l.done, l.slow, l.took = now, 0, 0, 0
}

// Bound is how many joins may be in flight now.
func (l *Limit) Bound() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.bound)
}
