package door

import (
	"context"
	"hash/maphash"
	"math"
	"net/netip"
	"sync"
	"time"

	"usher/internal/catalog"
	"usher/internal/pow"
	"usher/internal/waitqueue"
)

// Auto difficulty. A queue with difficulty "auto" asks Min bits while it
// is calm. Two things raise it, within [Min, Max]:
//
//   - Pressure: joins outpacing admissions. Each gateway samples the line
//     at most once a second (one Redis read: waiting, pre-queued, admitted
//     in all, the admitter's measured admission rate). Joins per second
//     are the growth of waiting + pre-queued + admitted in all (places
//     taken: a refused join takes none; a scheduled drop's pre-queue joins
//     count as any, and its draw, moving the pre-queue into the line, as
//     none), smoothed: a rise counts at once, a fall fades with a 10 s time
//     constant. The queue asks one more bit per doubling of joins over
//     admissions: floor(log2(joins/s ÷ max(admissions/s, 1))) bits, so
//     joins at 8× the admission rate add 3 bits (8× the work). The bits
//     rise at once and fall back one every 10 s once the pressure passes.
//   - Repeat customers: challenges issued to one address (IPv4, or an IPv6
//     /64) or its subnet (/24, /48) in the last minute or so, counted in a
//     fixed-size sketch in this gateway's memory. Beyond a free allowance
//     (16 per address, 64 per subnet) a client's own challenges get one
//     more bit per doubling, so a client taking n places pays about n² work.
//
// A proof is accepted if its challenge asked at least the queue's current
// difficulty less one bit (never less than Min): a shopper who started
// solving just before a rise is not sent back, while challenges stocked up
// while the queue was quiet stop working when it gets busy.

const (
	sampleEvery   = time.Second      // at most one line read per queue per gateway
	fallTau       = 10 * time.Second // how fast a measured join rate fades
	stepDownEvery = 10 * time.Second // one bit down per this, once the pressure passes
	autoSlack     = 1                // bits a proof may lag the current difficulty

	sketchHalfLife = 30 * time.Second
	addrFree       = 16 // challenges per address before its own extra bits
	netFree        = 64 // per /24 (IPv4) or /48 (IPv6)
)

// pressure is one queue's join pressure as this gateway last sampled it.
type pressure struct {
	mu        sync.Mutex
	sampling  bool
	at        time.Time       // the last sample (zero: none yet)
	total     int64           // waiting + pre-queued + admitted in all, then
	joinRate  float64         // joins per second, smoothed
	st        waitqueue.Stats // the last sample's figures
	bits      int             // pressure bits over Min
	changedAt time.Time
}

// Forget drops the pressure kept for queue q, once it is deleted.
func (d *Door) Forget(q string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.pressures, q)
}

func (d *Door) pressureOf(q string) *pressure {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.pressures[q]
	if p == nil {
		p = &pressure{}
		d.pressures[q] = p
	}
	return p
}

// sample reads the line's figures for q when the last sample is older
// than sampleEvery, and moves the pressure bits. One caller samples while
// the others go on with the last figures.
func (d *Door) sample(ctx context.Context, q string, now time.Time) (waitqueue.Stats, int, error) {
	p := d.pressureOf(q)
	p.mu.Lock()
	if p.sampling || (!p.at.IsZero() && now.Sub(p.at) < sampleEvery) {
		defer p.mu.Unlock()
		return p.st, p.bits, nil
	}
	p.sampling = true
	p.mu.Unlock()
	st, err := d.line.Stats(ctx, q)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sampling = false
	if err != nil {
		return p.st, p.bits, err
	}
	p.observe(st, now)
	return p.st, p.bits, nil
}

// observe takes one sample of the line's figures at now.
func (p *pressure) observe(st waitqueue.Stats, now time.Time) {
	total := st.Waiting + st.PreQueue + st.AdmittedTotal
	if p.at.IsZero() {
		p.at, p.total, p.st, p.changedAt = now, total, st, now
		return
	}
	dt := now.Sub(p.at).Seconds()
	if dt <= 0 {
		return
	}
	rate := float64(max(total-p.total, 0)) / dt
	if rate >= p.joinRate {
		p.joinRate = rate
	} else {
		p.joinRate += (rate - p.joinRate) * (1 - math.Exp(-dt/fallTau.Seconds()))
	}
	p.at, p.total, p.st = now, total, st
	switch target := pressureBits(p.joinRate, st.AdmitRatePerSec); {
	case target > p.bits:
		p.bits, p.changedAt = target, now
	case target < p.bits && now.Sub(p.changedAt) >= stepDownEvery:
		p.bits, p.changedAt = p.bits-1, now
	}
}

// pressureBits is one bit per doubling of joins over admissions (an
// admission rate below one a second counts as one: a queue that admits
// nobody yet, or is paused, is not infinitely pressed).
func pressureBits(joinRate, admitRate float64) int {
	ratio := joinRate / max(admitRate, 1)
	if ratio < 2 {
		return 0
	}
	return min(int(math.Log2(ratio)), pow.MaxDifficulty)
}

// Difficulty is the queue's current difficulty, before any client's own
// bits: 0 when off, the configured bits, or under auto Min plus the
// pressure bits, at most Max. It is also the usher_pow_difficulty gauge.
func (d *Door) Difficulty(ctx context.Context, cfg catalog.Config, now time.Time) (int, error) {
	ch := cfg.Challenge
	n := 0
	switch {
	case !ch.On():
	case ch.Difficulty != catalog.DifficultyAuto:
		n = int(ch.Difficulty)
	default:
		_, bits, err := d.sample(ctx, cfg.Name, now)
		if err != nil {
			return 0, err
		}
		n = min(ch.Min+bits, ch.Max)
	}
	d.metrics.Difficulty.WithLabelValues(cfg.Name).Set(float64(n))
	return n, nil
}

// required is the least difficulty a proof's challenge may have asked for.
func (d *Door) required(ctx context.Context, cfg catalog.Config, now time.Time) (int, error) {
	n, err := d.Difficulty(ctx, cfg, now)
	if err != nil || cfg.Challenge.Difficulty != catalog.DifficultyAuto {
		return n, err
	}
	return max(n-autoSlack, cfg.Challenge.Min), nil
}

// clientBits is the extra bits a client's challenges carry for asking
// often: one per doubling beyond the free allowance of its address or
// subnet, whichever is more.
func (d *Door) clientBits(q string, client netip.Addr, now time.Time) int {
	var kb [sketchKeyMax]byte
	addr := d.asked.count(sketchKey(&kb, q, addrPrefix(client)), now)
	subnet := d.asked.count(sketchKey(&kb, q, netPrefix(client)), now)
	return max(overBits(addr, addrFree), overBits(subnet, netFree))
}

// overBits is ceil(log2(n/free)) for n beyond free, else 0.
func overBits(n, free int) int {
	if n <= free {
		return 0
	}
	return int(math.Ceil(math.Log2(float64(n) / float64(free))))
}

// noteIssued counts a challenge issued to client.
func (d *Door) noteIssued(q string, client netip.Addr, now time.Time) {
	var kb [sketchKeyMax]byte
	d.asked.add(sketchKey(&kb, q, addrPrefix(client)), now)
	d.asked.add(sketchKey(&kb, q, netPrefix(client)), now)
}

// noteFailed counts a refused join from client and returns how many its
// address has now.
func (d *Door) noteFailed(q string, client netip.Addr, now time.Time) int {
	var kb [sketchKeyMax]byte
	return d.failed.add(sketchKey(&kb, q, addrPrefix(client)), now)
}

// addrPrefix is one client: an IPv4 address, an IPv6 /64.
func addrPrefix(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// netPrefix is a client's neighbourhood: an IPv4 /24, an IPv6 /48.
func netPrefix(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := 48
	if a.Is4() {
		bits = 24
	}
	p, _ := a.Prefix(bits)
	return p
}

// sketchKeyMax holds a queue name (at most 64 bytes), a separator and a
// prefix (16 bytes of address, its length).
const sketchKeyMax = 64 + 1 + 17

// sketchKey writes q and p into buf and returns the key.
func sketchKey(buf *[sketchKeyMax]byte, q string, p netip.Prefix) []byte {
	n := copy(buf[:64], q)
	buf[n] = 0
	a := p.Addr().As16()
	copy(buf[n+1:], a[:])
	buf[n+17] = byte(p.Bits())
	return buf[:n+18]
}

const (
	sketchRows  = 4
	sketchWidth = 1 << 16
)

// sketch counts events per key approximately, in fixed memory (512 KiB)
// whatever the number of keys — 30,000 bot addresses cost what 3 do. It is
// a count-min sketch with conservative update: a count is never
// underestimated, and overestimated only by collisions in all four rows.
// Every count halves each halfLife, so an address is judged by roughly its
// last minute. Counts saturate at 65,535. Safe for concurrent use.
type sketch struct {
	mu       sync.Mutex
	seed     maphash.Seed
	rows     [sketchRows][]uint16
	halfLife time.Duration
	decayed  time.Time // when the counts were last halved
}

func newSketch(halfLife time.Duration) *sketch {
	s := &sketch{seed: maphash.MakeSeed(), halfLife: halfLife}
	for i := range s.rows {
		s.rows[i] = make([]uint16, sketchWidth)
	}
	return s
}

// cells are a key's counter in each row: the four 16-bit quarters of its
// 64-bit hash.
func (s *sketch) cells(key []byte) [sketchRows]uint16 {
	h := maphash.Bytes(s.seed, key)
	return [sketchRows]uint16{uint16(h), uint16(h >> 16), uint16(h >> 32), uint16(h >> 48)}
}

// decay halves every count once per halfLife passed since the last time.
func (s *sketch) decay(now time.Time) {
	if s.decayed.IsZero() {
		s.decayed = now
		return
	}
	periods := int(now.Sub(s.decayed) / s.halfLife)
	if periods <= 0 {
		return
	}
	s.decayed = s.decayed.Add(time.Duration(periods) * s.halfLife)
	shift := uint(min(periods, 16))
	for _, row := range s.rows {
		for i := range row {
			row[i] >>= shift
		}
	}
}

// add counts one event of key and returns its new count.
func (s *sketch) add(key []byte, now time.Time) int {
	c := s.cells(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decay(now)
	least := uint16(math.MaxUint16)
	for i, j := range c {
		least = min(least, s.rows[i][j])
	}
	if least == math.MaxUint16 {
		return int(least)
	}
	// Conservative update: raise only the counters at the minimum.
	for i, j := range c {
		if s.rows[i][j] == least {
			s.rows[i][j] = least + 1
		}
	}
	return int(least) + 1
}

// count is key's count.
func (s *sketch) count(key []byte, now time.Time) int {
	c := s.cells(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.decay(now)
	least := uint16(math.MaxUint16)
	for i, j := range c {
		least = min(least, s.rows[i][j])
	}
	return int(least)
}
