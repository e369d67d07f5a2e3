package gate

import (
	"sync"
	"time"

	"usher/internal/waitqueue/passes"
)

// recent remembers, for a moment, the passes whose admission the line just
// found holding its slot, with the entry token minted for them: a shopper's
// page pulls its scripts, images and API calls through the gate together,
// and each would otherwise cost a Redis script and an Ed25519 signature
// for the same answer. A remembered answer is good until Recheck has passed
// or the admission expires, whichever is first; a completion through this
// gateway forgets it at once. The price: another gateway's completion, the
// idle sweep or a leave is seen here up to Recheck late, and a pass's use
// is recorded at most once per Recheck per gateway (passIdle is at least
// 10 s, far longer).
type recent struct {
	mu      sync.Mutex
	recheck time.Duration // 0: remember nothing
	max     int
	held    map[passKey]heldPass
}

// passKey names an admission's pass.
type passKey struct {
	queue string
	seq   uint64
	user  string
}

// heldPass is what the line said of a pass, and the token minted for it.
type heldPass struct {
	use   passes.Use
	token string
	until time.Time
}

// maxRecent bounds the passes remembered: past it, expired ones are
// dropped, and while none has, new answers are not remembered.
const maxRecent = 100_000

func newRecent(recheck time.Duration) *recent {
	return &recent{recheck: max(recheck, 0), max: maxRecent, held: map[passKey]heldPass{}}
}

// get is the remembered answer for k at now, if still good.
func (r *recent) get(k passKey, now time.Time) (heldPass, bool) {
	if r.recheck == 0 {
		return heldPass{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.held[k]
	if ok && !now.Before(h.until) {
		delete(r.held, k)
		return heldPass{}, false
	}
	return h, ok
}

// put remembers that k's admission held its slot at now.
func (r *recent) put(k passKey, use passes.Use, token string, now time.Time) {
	if r.recheck == 0 {
		return
	}
	until := now.Add(r.recheck)
	if !use.ExpiresAt.IsZero() && use.ExpiresAt.Before(until) {
		until = use.ExpiresAt
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) >= r.max {
		for k, h := range r.held {
			if !now.Before(h.until) {
				delete(r.held, k)
			}
		}
		if len(r.held) >= r.max {
			return
		}
	}
	r.held[k] = heldPass{use: use, token: token, until: until}
}

// forget drops k: its slot is being freed.
func (r *recent) forget(k passKey) {
	r.mu.Lock()
	delete(r.held, k)
	r.mu.Unlock()
}
