// Package catalog holds every queue's configuration in a NATS KV bucket and
// keeps a live copy in each process.
//
// A change written by any gateway (or usherctl) reaches every admitter and
// gateway through what the bucket republishes once stored (see follow.go),
// typically within milliseconds and well within the one second the design
// promises, without restarts. The bucket's history keeps the last changes
// of each queue.
package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
)

// Bucket is the KV bucket holding queue configurations.
const Bucket = "USHER_QUEUES"

// keyPrefix begins the subject of each of the bucket's keys.
const keyPrefix = "$KV." + Bucket + "."

// Queue states.
const (
	StateOpen   = "open"   // joins accepted, shoppers admitted
	StatePaused = "paused" // joins accepted, nobody admitted
	StateClosed = "closed" // joins refused (410), waiting shoppers told CLOSED
)

// Config is one queue's live settings.
type Config struct {
	Name            string `json:"name"`
	TargetActive    int    `json:"targetActive"`
	MaxAdmitPerTick int    `json:"maxAdmitPerTick"`
	TickMs          int    `json:"tickMs"`
	TokenTTLSeconds int    `json:"tokenTtlSeconds"`
	State           string `json:"state"`
	// ClosedReason says why a closed queue closed (sold_out when its SKU
	// ran out, ended once closesAt passed); waiting shoppers see it.
	ClosedReason string `json:"closedReason,omitempty"`
	// SKU is the product the queue sells: an entry token of this queue
	// orders this SKU only. SKUs, when set, replaces it: the variants the
	// queue sells (sizes of one sneaker), an order names one of them.
	SKU  string   `json:"sku,omitempty"`
	SKUs []string `json:"skus,omitempty"`
	// MaxQuantity is the most units one order may take (0, as in
	// configurations stored before it existed, means 1).
	MaxQuantity int `json:"maxQuantity"`
	// MaxPerUser bounds a user's units across all orders of the queue's
	// SKUs (0: MaxQuantity). A user who reached it is refused at join.
	MaxPerUser int `json:"maxPerUser,omitempty"`
	// AbandonAfterSeconds: a waiting shopper whose client neither polls
	// nor holds an event stream this long leaves the line (LEFT, reason
	// abandoned), so positions, counts and ETAs are of shoppers who are
	// there. Unset: DefaultAbandonAfter; 0: never.
	AbandonAfterSeconds *int `json:"abandonAfterSeconds,omitempty"`
	// Notice is what the operators tell the line (PUT and DELETE
	// /v1/admin/queues/{q}/notice): every waiting shopper sees it.
	Notice *Notice `json:"notice,omitempty"`
	// StockAware (default true for a queue that sells something) admits
	// only against units that could still be sold, holds the line while
	// the last units are with shoppers ahead, and closes it as sold_out
	// the moment nothing is left. false turns that off (a comparison run).
	StockAware *bool `json:"stockAware,omitempty"`
	// OpensAt schedules the drop: before it, joins enter a pre-queue (no
	// place yet); at it, everyone in the pre-queue gets a place by a
	// lottery anyone can verify (see Lottery), and later joins go FIFO
	// behind them. ClosesAt ends the drop: joins after it get 410 (ended).
	OpensAt  *time.Time `json:"opensAt,omitempty"`
	ClosesAt *time.Time `json:"closesAt,omitempty"`
	// Mode is queue (the default), passthrough (every join READY at once,
	// no cap, everything counted as if queued: a dry run to size a drop)
	// or reject (maintenance: joins get 503 with Retry-After).
	Mode string `json:"mode,omitempty"`
	// Allow names users who pass the line into the next free slot
	// (counted against targetActive). Single-use invite codes do the same
	// (POST /v1/admin/queues/{q}/invites).
	Allow []string `json:"allow,omitempty"`
	// Lottery is usher's, not the operator's: the commitment to the
	// pre-queue's draw, set when opensAt is and never changed after, and
	// the seed once drawn.
	Lottery *Lottery `json:"lottery,omitempty"`
	// RateLimit refuses bots and refresh storms with 429 before they
	// reach the line.
	RateLimit RateLimit `json:"rateLimit"`
	// Challenge asks every join for a proof of work (off by default):
	// see Challenge and package pow.
	Challenge Challenge `json:"challenge"`
	// Adaptive, when enabled, has the admitter find targetActive by
	// measuring the order path (package adaptive); nil or disabled: the
	// configured targetActive holds.
	Adaptive *Adaptive `json:"adaptive,omitempty"`
}

// Adaptive is a queue's adaptive admission: the limit the admission tick
// uses moves within [Min, Max], starting at TargetActive, one decision per
// window (WindowMs, 0 = DefaultAdaptiveWindowMs).
type Adaptive struct {
	Enabled  bool `json:"enabled"`
	Min      int  `json:"min"`
	Max      int  `json:"max"`
	WindowMs int  `json:"windowMs,omitempty"`
}

// DefaultAdaptiveWindowMs is the adaptive controller's decision window.
const DefaultAdaptiveWindowMs = 1000

// AdaptiveOn reports whether the queue's targetActive is adaptive.
func (c Config) AdaptiveOn() bool { return c.Adaptive != nil && c.Adaptive.Enabled }

// AdaptiveWindow is the adaptive controller's decision window.
func (c Config) AdaptiveWindow() int {
	if c.Adaptive == nil || c.Adaptive.WindowMs == 0 {
		return DefaultAdaptiveWindowMs
	}
	return c.Adaptive.WindowMs
}

// RateLimit is a queue's request limits (GCRA: a burst at once, then a
// sustained rate per second). A rate of 0 turns that limit off. Joins are
// limited per client IP and per user, orders per IP, per user and in
// total; polls are never limited: a waiting shopper must see the line.
type RateLimit struct {
	PerIPPerSecond   int `json:"perIpPerSecond"`
	PerIPBurst       int `json:"perIpBurst"`
	PerUserPerSecond int `json:"perUserPerSecond"`
	PerUserBurst     int `json:"perUserBurst"`
	// OrdersPerSecond caps the queue's orders in total, a last guard in
	// case the line is ever bypassed; its burst is one second's worth.
	OrdersPerSecond int `json:"ordersPerSecond"`
}

// DefaultRateLimit is what a shop behind a CDN or a carrier's NAT can live
// with: 50/s with a burst of 100 per IP leaves room for hundreds of real
// shoppers sharing one address (each joins once and then only polls),
// while a bot on its own address is cut to 50 joins a second. A person
// double-clicks and refreshes, and a join is idempotent, so 5/s with a
// burst of 10 per user never touches a human and stops a script. 200
// orders/s is the seeds' order path at its ceiling (40 connections / 0.2 s
// per transaction): more cannot be taken anyway.
func DefaultRateLimit() RateLimit {
	return RateLimit{PerIPPerSecond: 50, PerIPBurst: 100, PerUserPerSecond: 5, PerUserBurst: 10, OrdersPerSecond: 200}
}

// maxRate bounds every rate and burst (the limiter's resolution is one
// request per microsecond).
const maxRate = 1_000_000

// OrderLimit is the most units one order may take.
func (c Config) OrderLimit() int { return max(c.MaxQuantity, 1) }

// Notice is a message to everyone in a queue's line: plain text, shown as
// is (never as HTML).
type Notice struct {
	Message string    `json:"message"`
	Level   string    `json:"level"` // NoticeInfo or NoticeWarning
	Since   time.Time `json:"since"`
}

// The notice levels.
const (
	NoticeInfo    = "info"
	NoticeWarning = "warning"
)

// MaxNotice is the longest notice, in characters.
const MaxNotice = 500

// Validate checks a notice: 1..MaxNotice characters of text, a known level.
func (n Notice) Validate() []FieldError {
	var errs []FieldError
	if l := utf8.RuneCountInString(strings.TrimSpace(n.Message)); l == 0 || l > MaxNotice || !utf8.ValidString(n.Message) {
		errs = append(errs, FieldError{"message", fmt.Sprintf("must be 1..%d characters of text", MaxNotice)})
	}
	for _, r := range n.Message {
		if unicode.IsControl(r) && r != '\n' {
			errs = append(errs, FieldError{"message", "must not contain control characters"})
			break
		}
	}
	if n.Level != NoticeInfo && n.Level != NoticeWarning {
		errs = append(errs, FieldError{"level", "must be info or warning"})
	}
	return errs
}

// DefaultAbandonAfter is a queue's abandonAfterSeconds when unset.
const DefaultAbandonAfter = 300 * time.Second

// MinAbandonAfter is the least abandonAfterSeconds: a client polls at
// least every third of it (see AbandonAfter), and never less often than a
// few seconds.
const MinAbandonAfter = 10 * time.Second

// AbandonAfter is how long a waiting shopper may be absent before leaving
// the line (0: never).
func (c Config) AbandonAfter() time.Duration {
	if c.AbandonAfterSeconds == nil {
		return DefaultAbandonAfter
	}
	return time.Duration(*c.AbandonAfterSeconds) * time.Second
}

// PresenceEvery is how sharply a waiting shopper's own polls record their
// presence: a tenth of the abandonment window, so a polling shopper is
// abandoned after at least nine tenths of it without a sign of them, never
// sooner; 0 when nobody is abandoned, so polls record nothing. Each record
// is a write the queue's Redis shard replicates; a poll that finds one this
// recent makes none. (The notifier records its streams' shoppers by a rule
// of its own: notifier/hub.go, presenceEvery.)
func (c Config) PresenceEvery() time.Duration {
	a := c.AbandonAfter()
	if a <= 0 {
		return 0
	}
	return max(a/10, time.Millisecond)
}

// UserLimit is the most units of the queue's SKUs one user may buy.
func (c Config) UserLimit() int {
	if c.MaxPerUser > 0 {
		return c.MaxPerUser
	}
	return c.OrderLimit()
}

// Products is the SKUs the queue sells (SKUs, or the one SKU).
func (c Config) Products() []string {
	if len(c.SKUs) > 0 {
		return c.SKUs
	}
	if c.SKU != "" {
		return []string{c.SKU}
	}
	return nil
}

// Sells reports whether sku is one of the queue's.
func (c Config) Sells(sku string) bool {
	for _, s := range c.Products() {
		if s == sku {
			return true
		}
	}
	return false
}

// StockAwareness reports whether admission follows the stock: on unless
// turned off, for a queue that sells something.
func (c Config) StockAwareness() bool {
	return len(c.Products()) > 0 && (c.StockAware == nil || *c.StockAware)
}

// Defaults returns the seeds' defaults: half of a 40-connection pool active,
// no per-tick cap, 100 ms ticks, five-minute tokens, open, one unit per
// order.
func Defaults(name string) Config {
	return Config{Name: name, TargetActive: 20, TickMs: 100, TokenTTLSeconds: 300, State: StateOpen, MaxQuantity: 1,
		RateLimit: DefaultRateLimit(), Challenge: DefaultChallenge()}
}

// ReasonSoldOut is the ClosedReason of a queue whose SKU ran out.
const ReasonSoldOut = "sold_out"

// The queue modes.
const (
	ModeQueue       = "queue"
	ModePassthrough = "passthrough"
	ModeReject      = "reject"
)

// Lottery is the pre-queue's draw: SHA-256 of a secret 32-byte seed is
// published (Commitment, lowercase hex) when the drop is scheduled; at
// opensAt the pre-queued shoppers are sorted ascending by
// HMAC-SHA256(key = seed, message = user id), compared as bytes, and the
// seed is revealed, so anyone can recompute the order.
type Lottery struct {
	Commitment string `json:"commitment"`
	// Seed is the seed in lowercase hex, written here by the draw that
	// reveals it; until then it waits in the seeds bucket, which only
	// admitters read (see SeedOf). A catalog written before seeds had a
	// bucket of their own holds it from the start; the API and the audit
	// records never show it before the draw (Redacted).
	Seed    string     `json:"seed,omitempty"`
	Drawn   bool       `json:"drawn,omitempty"`
	DrawnAt *time.Time `json:"drawnAt,omitempty"`
	// Entries is how many pre-queued shoppers the draw placed, and
	// EntriesCursor the entries stream sequence whose pre-queue it drew
	// (every pre-queue join up to it, none after).
	Entries       int    `json:"entries,omitempty"`
	EntriesCursor uint64 `json:"entriesCursor,omitempty"`
	// OrderDigest is SHA-256 (lowercase hex) of the drawn user ids in
	// lottery order, one a line (lottery.Digest): published with the seed,
	// so that anyone holding the pre-queue's list can check it is the one
	// drawn.
	OrderDigest string `json:"orderDigest,omitempty"`
}

// QueueMode is the queue's mode (ModeQueue when unset).
func (c Config) QueueMode() string {
	if c.Mode == "" {
		return ModeQueue
	}
	return c.Mode
}

// PreQueue reports whether a join at now enters the pre-queue: the drop is
// scheduled and not open yet.
func (c Config) PreQueue(now time.Time) bool {
	return c.OpensAt != nil && now.Before(*c.OpensAt)
}

// Drawn reports whether the drop's pre-queue lottery has been drawn.
func (c Config) Drawn() bool { return c.Lottery != nil && c.Lottery.Drawn }

// Ended reports whether the drop is over at now (closesAt passed).
func (c Config) Ended(now time.Time) bool {
	return c.ClosesAt != nil && !now.Before(*c.ClosesAt)
}

// Allows reports whether user may pass the line.
func (c Config) Allows(user string) bool {
	for _, u := range c.Allow {
		if u == user {
			return true
		}
	}
	return false
}

// ReasonEnded is the reason a join after closesAt is refused, and the
// ClosedReason of a queue the admitter closed once its closesAt passed.
const ReasonEnded = "ended"

var skuRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidSKU reports whether s can name a SKU: 1–64 of A-Z a-z 0-9 . _ -.
func ValidSKU(s string) bool { return skuRE.MatchString(s) }

// ValidUser reports whether id is an acceptable user id (X-User-Id, a user
// JWT's sub, an allow-listed user): 1–64 of A-Z a-z 0-9 . _ : @ -.
func ValidUser(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == ':', c == '@', c == '-':
		default:
			return false
		}
	}
	return true
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether s can name a queue: 1–64 of A-Z a-z 0-9 _ -, so
// it is safe as a NATS subject token, a KV key and a Redis hash tag.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// FieldError is one invalid field.
type FieldError struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// The largest targetActive (and maxAdmitPerTick), tickMs and
// tokenTtlSeconds a queue may have.
const (
	MaxTargetActive    = 1_000_000
	MaxTickMs          = 60_000
	MaxTokenTTLSeconds = 86_400
)

// Validate lists every invalid field of c, in the order of its fields, so
// an operator fixes them all at once.
func (c Config) Validate() []FieldError {
	var errs []FieldError
	add := func(name, reason string) { errs = append(errs, FieldError{name, reason}) }
	validateAdmission(c, add)
	validateSKUs(c.SKUs, add)
	validateDoor(c, add)
	validateOrders(c, add)
	if len(c.ClosedReason) > 64 {
		add("closedReason", "must be at most 64 characters")
	}
	if c.Adaptive != nil {
		c.Adaptive.validate(c.TargetActive, add)
	}
	errs = append(errs, c.Challenge.validate()...)
	c.RateLimit.validate(add)
	return errs
}

// validateAdmission checks the queue's name and the figures its admission
// tick runs on.
func validateAdmission(c Config, add func(name, reason string)) {
	if !ValidName(c.Name) {
		add("name", "must be 1-64 of A-Z a-z 0-9 _ -")
	}
	// The upper bounds keep every figure a time.Duration and the line's
	// scripts can hold: beyond them a tick or a token's lifetime wraps
	// around (10^11 s of TTL read as 246 years, 10^13 ms of tick as a
	// negative one).
	if c.TargetActive < 1 || c.TargetActive > MaxTargetActive {
		add("targetActive", "must be 1..1000000")
	}
	if c.MaxAdmitPerTick < 0 || c.MaxAdmitPerTick > MaxTargetActive {
		add("maxAdmitPerTick", "must be 0..1000000 (0 = no cap)")
	}
	if c.TickMs < 10 || c.TickMs > MaxTickMs {
		add("tickMs", "must be 10..60000")
	}
	if c.TokenTTLSeconds < 1 || c.TokenTTLSeconds > MaxTokenTTLSeconds {
		add("tokenTtlSeconds", "must be 1..86400")
	}
	if c.State != StateOpen && c.State != StatePaused && c.State != StateClosed {
		add("state", "must be open, paused or closed")
	}
}

// validateSKUs checks the SKUs a queue sells: a few distinct, well-formed
// names (one complaint for the list, not one per SKU).
func validateSKUs(skus []string, add func(name, reason string)) {
	if len(skus) > 100 {
		add("skus", "must list at most 100 SKUs")
	}
	seen := map[string]bool{}
	for _, sku := range skus {
		if !ValidSKU(sku) || seen[sku] {
			add("skus", "must be distinct SKUs of 1-64 of A-Z a-z 0-9 . _ -")
			break
		}
		seen[sku] = true
	}
}

// validateDoor checks who comes in and when: the mode, the opening hours,
// the allow-list, the notice shown and when a shopper who left the page is
// taken out of line.
func validateDoor(c Config, add func(name, reason string)) {
	switch c.Mode {
	case "", ModeQueue, ModePassthrough, ModeReject:
	default:
		add("mode", "must be queue, passthrough or reject")
	}
	if c.OpensAt != nil && c.ClosesAt != nil && !c.ClosesAt.After(*c.OpensAt) {
		add("closesAt", "must be after opensAt")
	}
	if len(c.Allow) > 10_000 {
		add("allow", "must list at most 10000 users")
	}
	for _, u := range c.Allow {
		if !ValidUser(u) {
			add("allow", "must list user ids of 1-64 of A-Z a-z 0-9 . _ : @ - (not "+strconv.Quote(u)+")")
			break
		}
	}
	if c.Notice != nil {
		for _, e := range c.Notice.Validate() {
			add("notice."+e.Name, e.Reason)
		}
	}
	if a := c.AbandonAfterSeconds; a != nil && *a != 0 && (*a < int(MinAbandonAfter.Seconds()) || *a > 86_400) {
		add("abandonAfterSeconds", "must be 0 (never) or 10..86400")
	}
}

// validateOrders checks what a shopper may order: how much, and of which
// SKU.
func validateOrders(c Config, add func(name, reason string)) {
	if c.MaxPerUser < 0 || c.MaxPerUser > 1_000_000 {
		add("maxPerUser", "must be 0..1000000 (0 = maxQuantity)")
	}
	if c.SKU != "" && !ValidSKU(c.SKU) {
		add("sku", "must be 1-64 of A-Z a-z 0-9 . _ -")
	}
	if c.SKU != "" && len(c.SKUs) > 0 {
		add("sku", "set sku or skus, not both (skus lists every SKU the queue sells)")
	}
	if c.MaxQuantity < 0 || c.MaxQuantity > 1000 {
		add("maxQuantity", "must be 1..1000 (0 means 1)")
	}
}

// validate checks the controller's bounds against the queue's targetActive,
// where the controller starts.
func (a Adaptive) validate(targetActive int, add func(name, reason string)) {
	switch {
	case a.Min < 0 || a.Max < 0 || a.Max > 100_000 || (a.Enabled && a.Min < 1):
		add("adaptive", "min and max must be 1..100000")
	case a.Enabled && (a.Min > targetActive || targetActive > a.Max):
		add("adaptive", "must have min <= targetActive <= max (the controller starts at targetActive)")
	}
	if a.WindowMs != 0 && (a.WindowMs < 100 || a.WindowMs > 60_000) {
		add("adaptive.windowMs", "must be 100..60000 (0 = 1000)")
	}
}

// validate checks every rate and burst within maxRate; a burst must let
// one request through while its rate is on.
func (rl RateLimit) validate(add func(name, reason string)) {
	for _, f := range []struct {
		name        string
		rate, burst int
	}{
		{"perIp", rl.PerIPPerSecond, rl.PerIPBurst},
		{"perUser", rl.PerUserPerSecond, rl.PerUserBurst},
		{"orders", rl.OrdersPerSecond, 1},
	} {
		if f.rate < 0 || f.rate > maxRate {
			add("rateLimit."+f.name+"PerSecond", "must be 0..1000000 (0 = off)")
		}
		if f.burst < 0 || f.burst > maxRate || (f.rate > 0 && f.burst < 1) {
			add("rateLimit."+f.name+"Burst", "must be 1..1000000 while the rate is on")
		}
	}
}

// Catalog is the live set of queue configurations.
type Catalog struct {
	kv jetstream.KeyValue
	f  *follower

	mu     sync.RWMutex
	queues map[string]Config
	// revs is the bucket revision each queue's live copy (or deletion)
	// comes from. The bucket republishes a process's own writes too,
	// after Put or Update has stored them, and a reload reads what the
	// bucket holds: without revs an older configuration would come back
	// for a moment (a PUT's new rate limits not applied to the next join).
	revs map[string]uint64
	// retired holds the queues deleted (Delete), with when: a retired
	// name is never a queue again (see Delete).
	retired  map[string]time.Time
	onChange func(Config) // see OnChange
	onRetire func(string) // see OnRetire
}

// OnChange has f called with every configuration this process learns of
// (from the bucket or its own Put), right after the live copy has it. Set
// it before Run; f must not block.
func (c *Catalog) OnChange(f func(Config)) {
	c.mu.Lock()
	c.onChange = f
	c.mu.Unlock()
}

// OnRetire has f called with the name of every queue this process learns
// was deleted (from the bucket or its own Delete), right after the live
// copy has dropped it: what a service keeps per queue — its metrics'
// series above all — would otherwise outlive the queue for as long as the
// process runs. Set it before Run; f must not block.
func (c *Catalog) OnRetire(f func(name string)) {
	c.mu.Lock()
	c.onRetire = f
	c.mu.Unlock()
}

// Open creates the bucket if needed — republishing every value it stores
// on event.CatalogLiveSubjects, and the lottery seeds' bucket beside it
// (DeclareSeeds) — or brings an existing one to that configuration, loads
// every queue and starts following changes. Call Run to keep following
// them.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Catalog, error) {
	if err := DeclareSeeds(ctx, js, replicas); err != nil {
		return nil, err
	}
	kv, err := declareBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket: Bucket, History: 16, Storage: jetstream.FileStorage, Replicas: replicas,
		RePublish: &jetstream.RePublish{Source: event.QueueConfigSubjects, Destination: event.CatalogLiveSubjects},
	})
	if err != nil {
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	return follow(ctx, js, kv)
}

// tombstone is what a deleted queue's key holds from then on: when it was
// deleted. A configuration has no field "retired".
type tombstone struct {
	Retired *time.Time `json:"retired"`
}

// RetiredAt reads a value of the bucket as a deleted queue's tombstone:
// when the queue was deleted.
func RetiredAt(v []byte) (time.Time, bool) {
	var t tombstone
	if json.Unmarshal(v, &t) != nil || t.Retired == nil {
		return time.Time{}, false
	}
	return *t.Retired, true
}

// retire makes queue name, deleted at at (revision rev), gone from the live
// copy and retired — unless the live copy comes from a later write — and
// tells OnRetire.
func (c *Catalog) retire(name string, at time.Time, rev uint64) {
	c.mu.Lock()
	if rev <= c.revs[name] {
		c.mu.Unlock()
		return
	}
	delete(c.queues, name)
	c.revs[name] = rev
	c.retired[name] = at
	f := c.onRetire
	c.mu.Unlock()
	if f != nil {
		f(name)
	}
}

// Retired reports whether queue name was deleted, and when.
func (c *Catalog) Retired(name string) (time.Time, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	at, ok := c.retired[name]
	return at, ok
}

// RetiredNames returns every deleted queue's name.
func (c *Catalog) RetiredNames() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.retired))
	for name := range c.retired {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// store makes cfg, written at revision rev, queue name's live copy — unless
// the live copy already comes from a later write — and tells OnChange.
func (c *Catalog) store(name string, cfg Config, rev uint64) {
	c.mu.Lock()
	if rev <= c.revs[name] {
		c.mu.Unlock()
		return
	}
	c.queues[name] = cfg
	c.revs[name] = rev
	delete(c.retired, name) // written over by hand (nats kv put): a queue again
	f := c.onChange
	c.mu.Unlock()
	if f != nil {
		f(cfg)
	}
}

// Get returns a queue's configuration from the live copy.
func (c *Catalog) Get(name string) (Config, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	cfg, ok := c.queues[name]
	return cfg, ok
}

// List returns every queue, by name.
func (c *Catalog) List() []Config {
	c.mu.RLock()
	out := make([]Config, 0, len(c.queues))
	for _, cfg := range c.queues {
		out = append(out, cfg)
	}
	c.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Put stores cfg (validated by the caller) and reports whether the queue is
// new. The live copy of this process sees it at once; others within
// milliseconds.
func (c *Catalog) Put(ctx context.Context, cfg Config) (created bool, err error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return false, err
	}
	rev, err := c.kv.Create(ctx, cfg.Name, b)
	if err == nil {
		created = true
	} else if errors.Is(err, jetstream.ErrKeyExists) {
		rev, err = c.replace(ctx, cfg.Name, b)
	}
	if err != nil {
		return false, fmt.Errorf("put queue %s: %w", cfg.Name, err)
	}
	c.store(cfg.Name, cfg, rev)
	return created, nil
}

// replace stores b over queue name's configuration, by compare-and-set so
// that a deletion in between is never written over: a retired name stays
// retired (ErrRetired).
func (c *Catalog) replace(ctx context.Context, name string, b []byte) (uint64, error) {
	for range updateAttempts {
		e, err := c.read(ctx, name)
		if err != nil {
			return 0, err
		}
		if _, ok := RetiredAt(e.value); ok {
			return 0, ErrRetired
		}
		rev, err := c.kv.Update(ctx, name, b, e.rev)
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return rev, err
		}
	}
	return 0, errors.New("too many concurrent writers")
}

// ErrRetired is the answer to a change of a queue that was deleted: its
// name stays with the events the streams hold under it.
var ErrRetired = errors.New("queue deleted; its name is not used again")

// ErrNoQueue is Delete's answer for a queue the catalog does not hold.
var ErrNoQueue = errors.New("no such queue")

// Delete takes queue name out of the catalog for good, by compare-and-set:
// may sees the configuration as stored and refuses with an error of its
// own, which Delete returns. The queue's key then holds a tombstone, so its
// name is never a queue again — the streams keep its events under that
// name, which a queue created anew would replay, audit and report as its
// own. It returns the configuration deleted.
func (c *Catalog) Delete(ctx context.Context, name string, at time.Time, may func(Config) error) (Config, error) {
	b, err := json.Marshal(tombstone{Retired: &at})
	if err != nil {
		return Config{}, err
	}
	for range updateAttempts {
		cfg, stored, err := c.stored(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, ErrRetired) {
			return Config{}, ErrNoQueue
		}
		if err != nil {
			return Config{}, fmt.Errorf("delete queue %s: %w", name, err)
		}
		if err := may(cfg); err != nil {
			return cfg, err
		}
		rev, err := c.kv.Update(ctx, name, b, stored)
		if err == nil {
			c.retire(name, at, rev)
			return cfg, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return cfg, fmt.Errorf("delete queue %s: %w", name, err)
		}
	}
	return Config{}, fmt.Errorf("delete queue %s: too many concurrent writers", name)
}

// stored reads queue name's configuration as the bucket holds it, with
// its revision, for a compare-and-set: fields it lacks take their defaults.
// A deleted queue's tombstone is ErrRetired.
func (c *Catalog) stored(ctx context.Context, name string) (Config, uint64, error) {
	cfg := Defaults(name)
	e, err := c.read(ctx, name)
	if err != nil {
		return cfg, 0, err
	}
	if _, ok := RetiredAt(e.value); ok {
		return cfg, 0, ErrRetired
	}
	if err := json.Unmarshal(e.value, &cfg); err != nil {
		return cfg, 0, err
	}
	return cfg, e.rev, nil
}

// read returns queue name's last value as the stream's leader holds it,
// or jetstream.ErrKeyNotFound. A compare-and-set reads there, not by the
// bucket's direct get, which any replica answers: one behind the leader
// (cut off by a partition) would hand Update a configuration older than
// the stored one, and a change already made there (a pause, a close)
// would read as still to make, or one still to make as made — answered
// ErrUnchanged while the bucket holds otherwise.
func (c *Catalog) read(ctx context.Context, name string) (entry, error) {
	m, err := c.f.stream.GetLastMsgForSubject(ctx, keyPrefix+name)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return entry{}, jetstream.ErrKeyNotFound
	}
	if err != nil {
		return entry{}, err
	}
	e := entryOf(m.Subject, m.Sequence, m.Header, m.Data)
	if e.key != name || e.deleted {
		return entry{}, jetstream.ErrKeyNotFound
	}
	return e, nil
}

// ErrUnchanged is Update's answer when change made no change.
var ErrUnchanged = errors.New("configuration unchanged")

// updateAttempts bounds how many times Update reads and writes again after
// losing to another writer: with its backoff, about 2 s of a queue's
// configuration changing without pause.
const updateAttempts = 50

// Update changes queue name's stored configuration with change, as a
// compare-and-set on the bucket's revision: change sees the configuration
// as stored (never a stale copy), and a concurrent writer's change is never
// overwritten — change runs again on what they wrote. change returns false
// to leave the queue as it is (ErrUnchanged). It returns the configuration
// before and after.
func (c *Catalog) Update(ctx context.Context, name string, change func(*Config) bool) (before, after Config, err error) {
	for attempt := 0; attempt < updateAttempts; attempt++ {
		if attempt > 0 {
			// Someone wrote in between: wait a random while, longer
			// after each loss, so that writers racing for one queue
			// (operators' PUTs, admitters closing it) take turns.
			select {
			case <-time.After(time.Duration(rand.Int64N(int64(min(time.Millisecond<<min(attempt, 6), 50*time.Millisecond))))):
			case <-ctx.Done():
				return before, after, fmt.Errorf("update queue %s: %w", name, ctx.Err())
			}
		}
		var stored uint64
		if before, stored, err = c.stored(ctx, name); err != nil {
			return before, after, fmt.Errorf("update queue %s: %w", name, err)
		}
		after = before
		after.SKUs = append([]string(nil), before.SKUs...)
		if before.Adaptive != nil {
			a := *before.Adaptive
			after.Adaptive = &a
		}
		if !change(&after) {
			return before, after, ErrUnchanged
		}
		b, err := json.Marshal(after)
		if err != nil {
			return before, after, err
		}
		rev, err := c.kv.Update(ctx, name, b, stored)
		if err == nil {
			c.store(name, after, rev)
			return before, after, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return before, after, fmt.Errorf("update queue %s: %w", name, err)
		}
		// Someone wrote in between: read their change and try again.
	}
	return before, after, fmt.Errorf("update queue %s: too many concurrent writers", name)
}
