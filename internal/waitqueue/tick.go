package waitqueue

import (
	"errors"
	"time"
)

// Head is how far a stream holds events of one queue: the stream sequence
// of its last such event (0: none) and the stream's identity.
type Head struct {
	Seq      uint64
	StreamID string
}

// Tick is the input of one admission tick. Its time is Redis's.
type Tick struct {
	Epoch           string // the entries stream's identity (token ids carry it)
	TargetActive    int
	MaxAdmitPerTick int // 0: no cap besides targetActive
	TickLength      time.Duration
	TokenTTL        time.Duration
	Paused          bool
	// Offset in [0,1000) places each readyAt within its slice of the tick.
	Offset int
	// Admissions and Orders are the streams' heads for this queue: nobody
	// is admitted until the line has applied them (see admission/admit.lua).
	Admissions, Orders Head
	// StockAware admits only against units that could still be sold;
	// Share names the queues those units are shared with (see Share).
	StockAware bool
	Share      Share
	// AwaitDraw: the queue is a scheduled drop; nobody is admitted until
	// its pre-queue is drawn.
	AwaitDraw bool
	// AbandonAfter: a waiting shopper not present for this long leaves the
	// line (see admission/admit.lua); 0: never.
	AbandonAfter time.Duration
	// NoJitter: every readyAt is the tick's own time, not spread across
	// the tick (a passthrough queue: nobody waits, not even a tick).
	NoJitter bool
}

// TickResult says what one tick did.
type TickResult struct {
	// Early: the queue's tick was not due (another admitter ran it); Next
	// says when it is.
	Early bool
	// Behind: the line has not applied every admission or order event the
	// streams hold; nobody was admitted.
	Behind            bool
	Next              time.Duration
	Expired, Admitted int
	Active, Waiting   int64
	// AdmitRatePerSec is the measured admission rate of the last minute,
	// the one Stats reports and ETAs use.
	AdmitRatePerSec float64
	// Stock is the stock state after the tick (see Entry.Stock) and
	// Sellable the units that could still go to the next in line, every
	// queue sharing the SKUs counted (see Share).
	Stock    string
	Sellable int64
	// Abandoned is how many waiting shoppers the tick found gone.
	Abandoned int
}

// AtOnce is what an admission at once needs besides what the queue's last
// tick recorded (its limit, maxAdmitPerTick and whether admission is
// paused: see admission/admit_now.lua).
type AtOnce struct {
	TokenTTL   time.Duration
	TickLength time.Duration
	// StockAware admits only against units that could still be sold;
	// Share names the queues those units are shared with (see Share). A
	// stock-aware admission at once reserves one unit in the ledger: it
	// admits the head of the line alone (the ticks admit the rest).
	StockAware bool
	Share      Share
}

// ErrNotCurrent says AdmitNow or AdmitEntry admitted nobody because of a
// guard only a tick lifts: no tick for two ticks and a second (is an
// admitter running?), or the last tick found the line behind the streams
// (an admission or an order event not applied yet — usually the one a
// tick has just published), or — AdmitNow only — the ticks' last readyAt
// lies ahead after ticks that caught up; or a tick used a later stock
// reservation meanwhile. The next tick may lift it (or a fresh
// reservation: try again).
var ErrNotCurrent = errors.New("waitqueue: the line is not current (no recent tick, behind the streams, or its last admissions not READY yet)")

// Admission is an admitted entry waiting in the outbox to be announced.
type Admission struct {
	Queue     string
	Seq       uint64
	User      string
	TokenID   string
	ReadyAt   time.Time
	ExpiresAt time.Time
	// JoinedAt is when the stream stored the join, as the line recorded it
	// (zero for an entry joined before the line kept it).
	JoinedAt time.Time
}

// UnrecordedLeave is a leave the line took that the entries stream does
// not hold yet: a shopper the line found gone (Reason ReasonAbandoned; see
// admission/admit.lua), or a shopper's own leave whose gateway did not
// store it (Reason ""; see line/leave.lua).
type UnrecordedLeave struct {
	Seq    uint64
	User   string
	Reason string
}

// Closing is what a closed queue's line says of its end, on Redis time.
type Closing struct {
	ClosedAt time.Time // when an admitter first saw the queue closed (zero: none has)
	Now      time.Time // Redis's time when it was read
	Held     int64     // the slots still held: admitted shoppers who may order
	FreeAt   time.Time // when the last of them frees (zero: none held)
}
