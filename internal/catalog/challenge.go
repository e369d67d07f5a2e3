package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"usher/internal/pow"
)

// Challenge modes.
const (
	ChallengeOff     = "off"     // joins need no proof (the default; "" means off)
	ChallengeLog     = "log"     // joins without a valid proof pass, and are counted
	ChallengeEnforce = "enforce" // joins without a valid proof get 428 and a challenge
)

// SuspectsShadow has clients that keep failing put in a shadow line.
const SuspectsShadow = "shadow"

// Challenge is a queue's proof of work at the door (package pow): a join
// carries a solved challenge in the Usher-PoW header.
type Challenge struct {
	// Mode is off, log (nothing is refused; what enforce would refuse is
	// counted, so ops see the numbers first) or enforce (428
	// challenge-required with a fresh challenge).
	Mode string `json:"mode"`
	// Difficulty is the leading zero bits a proof needs (0..32; every bit
	// doubles the work), or auto: Min while the queue is calm, more while
	// joins outpace admissions and for addresses that keep asking, at
	// most Max.
	Difficulty Difficulty `json:"difficulty"`
	// Min and Max bound an auto difficulty (0 <= Min <= Max <= 32).
	Min int `json:"min"`
	Max int `json:"max"`
	// Suspects is "" or shadow: under enforce, a client whose address
	// keeps failing gets a real-looking ticket in a shadow line that never
	// moves (and never takes a place or reaches the streams) instead of
	// an error that tells it to adapt.
	Suspects string `json:"suspects,omitempty"`
}

// DefaultChallenge is off; its difficulty and bounds are what a shop
// turning it on starts from (see BENCHMARKS.md, "Proof of work at the
// door"): 19 bits cost a phone-class browser about a second on average,
// auto starts at a quarter of that (17) and asks at most 8 s (22) under
// attack.
func DefaultChallenge() Challenge {
	return Challenge{Mode: ChallengeOff, Difficulty: 19, Min: 17, Max: 22}
}

// On reports whether joins are checked at all (log or enforce).
func (c Challenge) On() bool { return c.Mode == ChallengeLog || c.Mode == ChallengeEnforce }

// Shadow reports whether failing clients go to the shadow line.
func (c Challenge) Shadow() bool { return c.Mode == ChallengeEnforce && c.Suspects == SuspectsShadow }

func (c Challenge) validate() []FieldError {
	var errs []FieldError
	add := func(name, reason string) { errs = append(errs, FieldError{"challenge." + name, reason}) }
	switch c.Mode {
	case "", ChallengeOff, ChallengeLog, ChallengeEnforce:
	default:
		add("mode", "must be off, log or enforce")
	}
	if c.Difficulty != DifficultyAuto && (c.Difficulty < 0 || c.Difficulty > pow.MaxDifficulty) {
		add("difficulty", fmt.Sprintf("must be 0..%d leading zero bits, or \"auto\"", pow.MaxDifficulty))
	}
	// The bound that is wrong is the one named: a max beyond 32 is max's
	// fault, not min's; bounds upside down are min's.
	bounds := fmt.Sprintf("min and max must be 0 <= min <= max <= %d", pow.MaxDifficulty)
	switch {
	case c.Min < 0 || c.Min > pow.MaxDifficulty:
		add("min", bounds)
	case c.Max < 0 || c.Max > pow.MaxDifficulty:
		add("max", bounds)
	case c.Min > c.Max:
		add("min", bounds)
	}
	switch c.Suspects {
	case "", SuspectsShadow:
	default:
		add("suspects", `must be "" or "shadow"`)
	}
	return errs
}

// Difficulty is a number of leading zero bits, or DifficultyAuto; in JSON
// a number or the string "auto".
type Difficulty int

// DifficultyAuto lets the gateway set the difficulty between Min and Max.
const DifficultyAuto Difficulty = -1

// MarshalJSON writes a number, or "auto".
func (d Difficulty) MarshalJSON() ([]byte, error) {
	if d == DifficultyAuto {
		return []byte(`"auto"`), nil
	}
	return strconv.AppendInt(nil, int64(d), 10), nil
}

// UnmarshalJSON reads a whole number or "auto".
func (d *Difficulty) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte(`"auto"`)) {
		*d = DifficultyAuto
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("difficulty: want leading zero bits (a whole number) or \"auto\"")
	}
	if n < 0 {
		// A negative number must not alias auto: it is simply invalid.
		n = pow.MaxDifficulty + 1
	}
	*d = Difficulty(n)
	return nil
}
