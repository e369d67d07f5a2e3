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
	"time"
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
)

// Source is the CloudEvents source of every event usher publishes.
const Source = "usher"

// EnterSubject is where a shopper's join to queue q is published.
func EnterSubject(q string) string { return "usher.enter." + q }

// AdmittedSubject is where the admission of a shopper to queue q is published.
func AdmittedSubject(q string) string { return "usher.admitted." + q }

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

// Joined says a shopper asked to join a queue. The JetStream sequence the
// stream gives it is the shopper's place in line.
type Joined struct {
	Queue    string    `json:"queue"`
	User     string    `json:"user"`
	JoinedAt time.Time `json:"joinedAt"`
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
func Marshal(id, typ, subject string, at time.Time, data any) ([]byte, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("marshal %s: %w", typ, err)
	}
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
func Unmarshal(b []byte, want string, v any) (Envelope, error) {
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

// LeaveSubject is where a shopper's leaving queue q is published.
func LeaveSubject(q string) string { return "usher.leave." + q }

// Left says a shopper gave up their place (or their unused slot).
type Left struct {
	Queue string `json:"queue"`
	User  string `json:"user"`
	Seq   uint64 `json:"seq"`
}

// ConfigChangedSubject is where configuration changes are recorded.
const ConfigChangedSubject = "usher.ops.config_changed"

// ConfigChanged records who changed a queue's configuration, and how.
// Config and Previous hold the queue configuration as JSON objects.
type ConfigChanged struct {
	Queue    string `json:"queue"`
	By       string `json:"by"`
	Config   any    `json:"config"`
	Previous any    `json:"previous,omitempty"`
}

// Order subjects, all in stream USHER_ORDERS.
const (
	OrderRequestedSubject = "usher.order.requested"
	OrderCompletedSubject = "usher.order.completed"
	OrderFailedSubject    = "usher.order.failed"
)

// OrderRequested says a shopper submitted an order with an entry token the
// gateway verified. Its id (and Nats-Msg-Id) is the order id, so a double
// submit is stored once. It carries the token's id, never the token.
type OrderRequested struct {
	OrderID        string    `json:"orderId"`
	TokenID        string    `json:"tokenId"`
	Queue          string    `json:"queue"`
	User           string    `json:"user"`
	SKU            string    `json:"sku"`
	Quantity       int       `json:"quantity"`
	TokenExpiresAt time.Time `json:"tokenExpiresAt"`
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
