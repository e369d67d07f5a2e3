// Package event defines the events usher publishes on NATS JetStream: their
// subjects, their streams and their versioned JSON payloads.
//
// Every event travels in a CloudEvents 1.0 JSON envelope (structured mode).
// The envelope's id doubles as the Nats-Msg-Id header, so a retried publish is
// dropped by the stream's duplicate window instead of being stored twice.
// A payload type never changes incompatibly: a breaking change gets a new type
// name with the next version suffix (usher.admitted.v2) and both are published
// while consumers move over.
package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"usher/internal/jsonenc"
)

// Stream names and the subjects they hold.
const (
	StreamEntries    = "USHER_ENTRIES"
	StreamAdmissions = "USHER_ADMISSIONS"
	StreamOrders     = "USHER_ORDERS"
	StreamOps        = "USHER_OPS"
)

// Event type names, one per payload version.
const (
	TypeJoined         = "usher.joined.v1"
	TypeAdmitted       = "usher.admitted.v1"
	TypeLeft           = "usher.left.v1"
	TypeOrderRequested = "usher.order.requested.v1"
	TypeOrderCompleted = "usher.order.completed.v1"
	TypeOrderFailed    = "usher.order.failed.v1"
	TypeConfigChanged  = "usher.ops.config_changed.v1"
	TypeLimitChanged   = "usher.ops.limit_changed.v1"
	TypeLotteryDrawn   = "usher.lottery.drawn.v1"
)

// Source is the CloudEvents source of every event usher publishes.
const Source = "usher"

// Subjects. Every subject usher uses is spelled here and nowhere else; a
// queue's events carry the queue as the last token, so a consumer (and a
// permission) can select one queue or all of them with a wildcard ("*").
const (
	enterPrefix    = "usher.enter."
	leavePrefix    = "usher.leave."
	admittedPrefix = "usher.admitted."
	// order subjects: usher.order.<requested|completed|failed>.<queue>
	orderRequestedPrefix = "usher.order.requested."
	orderCompletedPrefix = "usher.order.completed."
	orderFailedPrefix    = "usher.order.failed."
)

// All is the queue token that matches every queue in a subject.
const All = "*"

// EnterSubject is where a shopper's join to queue q is published.
func EnterSubject(q string) string { return enterPrefix + q }

// LeaveSubject is where a shopper's leaving queue q is published.
func LeaveSubject(q string) string { return leavePrefix + q }

// AdmittedSubject is where the admission of a shopper to queue q is published.
func AdmittedSubject(q string) string { return admittedPrefix + q }

// OrderRequestedSubject is where an order of queue q is requested.
func OrderRequestedSubject(q string) string { return orderRequestedPrefix + q }

// OrderCompletedSubject is where a PAID order of queue q is announced.
func OrderCompletedSubject(q string) string { return orderCompletedPrefix + q }

// OrderFailedSubject is where a FAILED or REJECTED order of queue q is announced.
func OrderFailedSubject(q string) string { return orderFailedPrefix + q }

// EntrySubjects matches the joins and leaves of queue q in USHER_ENTRIES.
func EntrySubjects(q string) string { return "usher.*." + q }

// OrderSubjects matches every order event of queue q (All: of every queue).
func OrderSubjects(q string) string { return "usher.order.*." + q }

// QueueOf returns the queue a subject of a queue's event names, and false
// for any other subject.
func QueueOf(subject string) (string, bool) {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 || !strings.HasPrefix(subject, "usher.") {
		return "", false
	}
	return subject[i+1:], true
}

// IsEnter and IsLeave tell the two kinds of USHER_ENTRIES events apart.
func IsEnter(subject string) bool { return strings.HasPrefix(subject, enterPrefix) }

// IsLeave reports whether subject is a leave's.
func IsLeave(subject string) bool { return strings.HasPrefix(subject, leavePrefix) }

// IsOrderRequested reports whether subject is an order request's.
func IsOrderRequested(subject string) bool { return strings.HasPrefix(subject, orderRequestedPrefix) }

// StreamSubjects are the subjects each stream holds.
func StreamSubjects() map[string][]string {
	return map[string][]string{
		StreamEntries:    {EnterSubject(All), LeaveSubject(All)},
		StreamAdmissions: {AdmittedSubject(All)},
		StreamOrders:     {OrderSubjects(All)},
		StreamOps:        {OpsSubjects},
	}
}

// OpsSubjects matches every ops event.
const OpsSubjects = "usher.ops.>"

// Live subjects: once a stream has stored an admission, a leave or an
// order event, it republishes it on the event's live subject
// (usher.live.admitted.<q>, usher.live.leave.<q>,
// usher.live.order.<kind>.<q>), which no stream captures and nobody may
// publish to. The notifier follows these, never the stored subjects: no
// role may subscribe to a subject a stream stores, so no role can give a
// push consumer the interest it needs to deliver into a stream (see
// bus.Policy.Permissions).
const livePrefix = "usher.live."

// Live is the live subject of a stored event's subject (or pattern):
// usher.admitted.q becomes usher.live.admitted.q.
func Live(subject string) string {
	return livePrefix + strings.TrimPrefix(subject, "usher.")
}

// The queue catalog is a JetStream KV bucket: JetStream keeps it in a
// stream of its own, one subject per queue.
const (
	BucketQueues = "USHER_QUEUES"
	// StreamQueues is the stream JetStream keeps the bucket in.
	StreamQueues = "KV_" + BucketQueues
	// QueueConfigSubjects matches every queue's configuration in the
	// bucket: a publish there is a write to the catalog.
	QueueConfigSubjects = "$KV." + BucketQueues + ".>"
	// CatalogLiveSubjects is where the bucket republishes every value it
	// stores, under usher.live.catalog.<queue>: the services follow the
	// catalog there with a plain subscription, no consumer, and no stream
	// captures it (see Live).
	CatalogLiveSubjects = livePrefix + "catalog.>"
)

// A scheduled drop's lottery seed waits for its draw in a KV bucket of its
// own, not in the catalog every service follows: the gateway writes it, the
// admitter alone reads it (see bus.Permissions), so neither the other
// services, nor usherctl, nor anyone who reads the catalog can know the
// lottery's order before the draw reveals the seed.
const (
	BucketSeeds = "USHER_SEEDS"
	// StreamSeeds is the stream JetStream keeps the bucket in.
	StreamSeeds = "KV_" + BucketSeeds
	// SeedSubjects matches every seed's subject: a publish there is a
	// write of a seed.
	SeedSubjects = "$KV." + BucketSeeds + ".>"
)

// SeedKey is the bucket's key of queue q's seed committed to as
// commitment (lowercase hex): one key per commitment, so that two
// operators scheduling a drop at once never leave the catalog committed to
// one seed and the bucket holding another.
func SeedKey(q, commitment string) string { return q + "." + commitment }

// SeedSubject is where the seed of SeedKey(q, commitment) is written.
func SeedSubject(q, commitment string) string {
	return "$KV." + BucketSeeds + "." + SeedKey(q, commitment)
}

// ConsumerOrderWorker is the durable consumer of order requests on
// USHER_ORDERS that every order worker shares.
const ConsumerOrderWorker = "orderworker"

// ReplaySubjects is where usherctl replay --republish may re-send events
// under broker auth: replay.<reader>.<anything>, for the downstream reader
// that lost its state. It is outside every usher stream, so a republish
// can never write into the record.
const ReplaySubjects = "replay.>"

// ReplaySubject is the republish subject of downstream reader name (and
// the subjects below it).
func ReplaySubject(name string) string { return "replay." + name + ".>" }

// Envelope is a CloudEvents 1.0 structured-mode JSON event.
type Envelope struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Time            time.Time       `json:"time"`
	Subject         string          `json:"subject,omitempty"`
	DataContentType string          `json:"datacontenttype"`
	Data            json.RawMessage `json:"data"`
}

// Joined says a shopper asked to join a queue (usher.joined.v1, one join a
// message). The JetStream sequence the stream gives it is the shopper's
// place in line (see Place); a gateway records joins in groups instead
// (Joins, usher.joins.v2), and both replay.
type Joined struct {
	Queue    string    `json:"queue"`
	User     string    `json:"user"`
	JoinedAt time.Time `json:"joinedAt"`
	// Prev is the user's previous entry in this queue, finished when the
	// gateway published this join (absent: none). It lets a replay tell a
	// new entry from a duplicate of a live one without knowing how prev
	// ended.
	Prev uint64 `json:"prev,omitempty"`
	// PreQueue: joined before the scheduled drop opened (its place comes
	// from the lottery). Priority: allowed past the line (an allow-listed
	// user or an invite code), into the next free slot.
	PreQueue bool `json:"preQueue,omitempty"`
	Priority bool `json:"priority,omitempty"`
}

// Admitted says a shopper left the line with an entry token. It carries the
// token's id, never the token itself: the token is a bearer credential and
// this stream is read by downstream services.
type Admitted struct {
	Queue     string    `json:"queue"`
	User      string    `json:"user"`
	Seq       uint64    `json:"seq"`
	TokenID   string    `json:"tokenId"`
	ReadyAt   time.Time `json:"readyAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Marshal wraps data in an envelope with the given id, type and subject.
//
// It writes the envelope around data's encoding itself: the same bytes as
// encoding/json's for Envelope (TestMarshalSameBytes), without encoding/json
// scanning and compacting data's encoding a second time as a RawMessage —
// two thirds of the JSON work of every join's publish in the gateway's
// profile of the join path (BENCHMARKS.md). A time encoding/json would
// refuse goes the long way, for its error.
func Marshal(id, typ, subject string, at time.Time, data any) ([]byte, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", typ, err)
	}
	b := make([]byte, 0, len(envelopeHead)+len(id)+len(typ)+len(subject)+len(raw)+128)
	b = append(b, envelopeHead...)
	b = jsonenc.AppendString(b, id)
	b = append(b, `,"source":`...)
	b = jsonenc.AppendString(b, Source)
	b = append(b, `,"type":`...)
	b = jsonenc.AppendString(b, typ)
	b = append(b, `,"time":`...)
	if b, err = jsonenc.AppendTime(b, at.UTC()); err != nil {
		return marshalEnvelope(id, typ, subject, at, raw)
	}
	if subject != "" {
		b = append(b, `,"subject":`...)
		b = jsonenc.AppendString(b, subject)
	}
	b = append(b, `,"datacontenttype":"application/json","data":`...)
	b = append(b, raw...) // json.Marshal's output: compact, HTML-escaped, as encoding/json would copy it
	return append(b, '}'), nil
}

// envelopeHead opens every envelope, up to its id's value.
const envelopeHead = `{"specversion":"1.0","id":`

// marshalEnvelope is encoding/json's encoding of the envelope: what Marshal
// writes, and its error where it has one.
func marshalEnvelope(id, typ, subject string, at time.Time, raw json.RawMessage) ([]byte, error) {
	return json.Marshal(Envelope{
		SpecVersion:     "1.0",
		ID:              id,
		Source:          Source,
		Type:            typ,
		Time:            at.UTC(),
		Subject:         subject,
		DataContentType: "application/json",
		Data:            raw,
	})
}

// ErrType is returned by Unmarshal when the envelope holds another type.
var ErrType = errors.New("unexpected event type")

// Unmarshal decodes an envelope and, when its type is want, its data into v.
// It accepts, refuses and decodes exactly what encoding/json does; joins,
// leaves and admissions as Marshal writes them take a path of their own
// (decode.go).
func Unmarshal(b []byte, want string, v any) (Envelope, error) {
	if env, ok, err := unmarshalFast(b, want, v); ok {
		return env, err
	}
	return unmarshalJSON(b, want, v)
}

// unmarshalJSON is Unmarshal with encoding/json alone.
func unmarshalJSON(b []byte, want string, v any) (Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return env, fmt.Errorf("decode envelope: %w", err)
	}
	if env.Type != want {
		return env, fmt.Errorf("%w: got %q, want %q", ErrType, env.Type, want)
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		return env, fmt.Errorf("decode %s: %w", want, err)
	}
	return env, nil
}

// Left says a shopper gave up their place (or their unused slot).
type Left struct {
	Queue string `json:"queue"`
	User  string `json:"user"`
	Seq   uint64 `json:"seq"`
	// Reason is empty when the shopper left, "abandoned" when the admitter
	// found them gone (no poll and no stream for the queue's
	// abandonAfterSeconds).
	Reason string `json:"reason,omitempty"`
}

// ConfigChangedSubject is where configuration changes are recorded.
const ConfigChangedSubject = "usher.ops.config_changed"

// LotteryDrawnSubject is where a scheduled drop's draw is recorded.
const LotteryDrawnSubject = "usher.ops.lottery_drawn"

// LotteryDrawn records the draw of a scheduled drop's pre-queue: the
// revealed seed (lowercase hex) and its commitment, published before the
// drop opened, so anyone can recompute the order (see package lottery).
// The pre-queue drawn is every live join marked preQueue in USHER_ENTRIES
// up to stream sequence EntriesCursor, none after; OrderDigest is SHA-256
// (lowercase hex) of their user ids in lottery order, each followed by a
// newline.
type LotteryDrawn struct {
	Queue         string    `json:"queue"`
	Seed          string    `json:"seed"`
	Commitment    string    `json:"commitment"`
	OpensAt       time.Time `json:"opensAt"`
	Entries       int       `json:"entries"`
	EntriesCursor uint64    `json:"entriesCursor"`
	OrderDigest   string    `json:"orderDigest"`
}

// ConfigChanged records who changed a queue's configuration, and how.
// Config and Previous hold the queue configuration as JSON objects.
type ConfigChanged struct {
	Queue    string `json:"queue"`
	By       string `json:"by"`
	Config   any    `json:"config"`
	Previous any    `json:"previous,omitempty"`
}

// MaxBy is the most characters a ConfigChanged's By may hold: a name, not
// a document (it is what an operator's X-Admin-User says).
const MaxBy = 128

// ValidBy reports whether by can name who made a change: 1 to MaxBy
// characters of valid UTF-8, each printable (no control characters, no
// line breaks).
func ValidBy(by string) bool {
	if by == "" || len(by) > MaxBy*utf8.UTFMax || !utf8.ValidString(by) || utf8.RuneCountInString(by) > MaxBy {
		return false
	}
	for _, r := range by {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// OrderRequested says a shopper submitted an order with an entry token the
// gateway verified and claimed. Its id (and Nats-Msg-Id) is the order id,
// so a double submit is stored once. It carries the token's id, never the
// token. RequestedAt is when the gateway claimed the token (Redis time):
// the order's deadline counts from it. TokenReadyAt is the token's readyAt
// (its nbf): the shopper's READY moment, from which the time to order
// counts (absent from requests of gateways from before it existed).
type OrderRequested struct {
	OrderID        string    `json:"orderId"`
	TokenID        string    `json:"tokenId"`
	Queue          string    `json:"queue"`
	User           string    `json:"user"`
	SKU            string    `json:"sku"`
	Quantity       int       `json:"quantity"`
	TokenExpiresAt time.Time `json:"tokenExpiresAt"`
	TokenReadyAt   time.Time `json:"tokenReadyAt,omitzero"`
	RequestedAt    time.Time `json:"requestedAt"`
}

// OrderFinished says an order reached its final status: published as
// usher.order.completed.v1 when PAID and as usher.order.failed.v1 when
// FAILED or REJECTED (Reason says why).
type OrderFinished struct {
	OrderID   string `json:"orderId"`
	TokenID   string `json:"tokenId"`
	Queue     string `json:"queue"`
	User      string `json:"user"`
	SKU       string `json:"sku"`
	Quantity  int    `json:"quantity"`
	Status    string `json:"status"`
	Reason    string `json:"reason,omitempty"`
	PaymentID string `json:"paymentId,omitempty"`
}

// LimitChangedSubject is where large moves of a queue's adaptive
// admission limit are recorded.
const LimitChangedSubject = "usher.ops.limit_changed"

// LimitChanged records a large move of a queue's adaptive limit (the
// targetActive its admission ticks use) and what the controller saw in
// the window that made it: one event per such decision, published by the
// admitter that made it.
type LimitChanged struct {
	Queue    string `json:"queue"`
	Limit    int    `json:"limit"`
	Previous int    `json:"previousLimit"` // the limit last recorded
	Reason   string `json:"reason"`
	Min      int    `json:"min"`
	Max      int    `json:"max"`
	// Window is the decision window (Redis time in ms ÷ WindowMs); the
	// figures are of the window before it.
	Window      int64   `json:"window"`
	WindowMs    int     `json:"windowMs"`
	Orders      int64   `json:"orders"`
	LatencyMs   float64 `json:"latencyMs"`  // smoothed order latency, request to final
	BaselineMs  float64 `json:"baselineMs"` // the no-load latency it was judged against
	Timeouts    int64   `json:"paymentTimeouts"`
	Failed      int64   `json:"failedOrders"`
	Deferred    int64   `json:"waitingOrders"`
	SlowHolds   int64   `json:"slowDbHolds"`
	Holds       int64   `json:"dbHolds"`
	BreakerOpen bool    `json:"breakerOpen"`
}

// NewLimitChanged is the id and body of the record of a limit change
// decided at at. The id names the queue's decision window, so the one
// decision of a window is stored once.
func NewLimitChanged(c LimitChanged, at time.Time) (id string, body []byte, err error) {
	id = "limit/" + c.Queue + "/" + strconv.FormatInt(c.Window, 10)
	body, err = Marshal(id, TypeLimitChanged, c.Queue, at, c)
	return id, body, err
}

// NewLeft is the id and body of a leave l recorded at at. A shopper's
// leave has one id whoever stores it — the gateway that took it, or the
// admitter storing what a gateway could not — so the stream keeps one;
// an abandonment's names the line's epoch as well.
func NewLeft(l Left, epoch string, at time.Time) (id string, body []byte, err error) {
	id = "leave/" + l.Queue + "/" + strconv.FormatUint(l.Seq, 10)
	if l.Reason != "" {
		id = l.Reason + "/" + l.Queue + "/" + epoch + "/" + strconv.FormatUint(l.Seq, 10)
	}
	body, err = Marshal(id, TypeLeft, l.User, at, l)
	return id, body, err
}

// NewConfigChanged is the id and body of the audit record of a change of
// queue's configuration made by by at at (previous: nil for a new queue).
func NewConfigChanged(queue, by string, cfg, previous any, at time.Time) (id string, body []byte, err error) {
	id = "config/" + queue + "/" + strconv.FormatInt(at.UnixNano(), 10)
	body, err = Marshal(id, TypeConfigChanged, queue, at, ConfigChanged{Queue: queue, By: by, Config: cfg, Previous: previous})
	return id, body, err
}
