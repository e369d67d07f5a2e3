package orders

import (
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/script"
)

// Record is the small copy of an order kept in Redis, so the gateway can
// answer a repeated submit and GET /v1/orders/{id} without touching
// PostgreSQL. PostgreSQL is the truth: the order worker rewrites the record
// from it whenever the order changes or is redelivered.
type Record struct {
	ID          string
	Owner       string
	Fingerprint string
	Queue       string
	SKU         string
	Quantity    int
	Status      Status
	Reason      string
	PaymentID   string
}

// Records reads and writes order records. It is safe for concurrent use.
type Records struct {
	rdb redis.UniversalClient
	ttl time.Duration
}

// NewRecords returns Records on rdb; records live for a day after their
// last change.
func NewRecords(rdb redis.UniversalClient) *Records {
	return &Records{rdb: rdb, ttl: keyspace.RecordTTL}
}

func recordKey(id string) string { return keyspace.OrderRecord(id) }

var recordFields = []string{"owner", "fp", "queue", "sku", "quantity", "status", "reason", "paymentId"}

// createScript (create_record.lua) creates a record unless one exists.
// See create_record.lua for its keys, arguments and reply.
var createScript = script.New(createLua)

//go:embed create_record.lua
var createLua string

// putScript (put_record.lua) writes a record from the truth.
// See put_record.lua for its keys, arguments and reply.
var putScript = script.New(putLua)

//go:embed put_record.lua
var putLua string

var markKeptScript = script.New(markKeptLua)

//go:embed mark_kept.lua
var markKeptLua string

// Outcome is what Create did.
type Outcome string

// Create's outcomes.
const (
	Created  Outcome = "created"  // a new record, PENDING
	Exists   Outcome = "exists"   // the same order was submitted before
	Conflict Outcome = "conflict" // the token was submitted with another body
)

// Create records a submitted order unless its token was submitted before,
// and returns the record as it stands.
func (r *Records) Create(ctx context.Context, rec Record) (Outcome, Record, error) {
	res, err := createScript.Run(ctx, r.rdb, []string{recordKey(rec.ID)},
		rec.Owner, rec.Fingerprint, rec.Queue, rec.SKU, rec.Quantity, int(r.ttl.Seconds())).StringSlice()
	if err != nil {
		return "", Record{}, fmt.Errorf("create order record %s: %w", rec.ID, err)
	}
	if len(res) != 9 {
		return "", Record{}, fmt.Errorf("create order record %s: reply of %d fields", rec.ID, len(res))
	}
	return Outcome(res[0]), recordOf(rec.ID, res[1:]), nil
}

// Get returns the record of order id, and false when there is none.
func (r *Records) Get(ctx context.Context, id string) (Record, bool, error) {
	v, err := r.rdb.HMGet(ctx, recordKey(id), recordFields...).Result()
	if err != nil {
		return Record{}, false, fmt.Errorf("get order record %s: %w", id, err)
	}
	if v[0] == nil {
		return Record{}, false, nil
	}
	s := make([]string, len(v))
	for i := range v {
		s[i], _ = v[i].(string)
	}
	return recordOf(id, s), true, nil
}

// Put writes the record as the store has it (see putScript).
func (r *Records) Put(ctx context.Context, rec Record) error {
	err := putScript.Run(ctx, r.rdb, []string{recordKey(rec.ID)}, putArgsOf(rec, r.ttl)...).Err()
	if err != nil {
		return fmt.Errorf("put order record %s: %w", rec.ID, err)
	}
	return nil
}

// PutAll writes records as the store has them (see putScript), many to a
// round trip: how a worker puts back what Redis lost.
func (r *Records) PutAll(ctx context.Context, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	if err := putScript.Load(ctx, r.rdb); err != nil {
		return fmt.Errorf("put order records: %w", err)
	}
	// Pipelined answers the first command's error, if any failed.
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, rec := range recs {
			putScript.EvalSha(ctx, p, []string{recordKey(rec.ID)}, putArgsOf(rec, r.ttl)...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put %d order records: %w", len(recs), err)
	}
	return nil
}

// Kept reports whether Redis holds every order record of the last
// RecordTTL (see keyspace.OrderRecordsKept); false after a loss and while
// the records are being put back.
func (r *Records) Kept(ctx context.Context) (bool, error) {
	v, err := r.rdb.Get(ctx, keyspace.OrderRecordsKept).Result()
	if err != nil && err != redis.Nil {
		return false, fmt.Errorf("are the order records kept: %w", err)
	}
	return v == keptValue, nil
}

// keptValue is the marker's value once the records are kept (mark_kept.lua
// sets it); a put-back in progress holds its own mark instead.
const keptValue = "1"

// BeginPutBack marks the start of a put-back and returns its mark, for
// MarkKept once every record is back. A put-back begun by another worker
// meanwhile takes the marker over; either finishing is enough.
func (r *Records) BeginPutBack(ctx context.Context) (string, error) {
	mark := "putting-back:" + rand.Text()
	if err := r.rdb.Set(ctx, keyspace.OrderRecordsKept, mark, 0).Err(); err != nil {
		return "", fmt.Errorf("mark a put-back of the order records: %w", err)
	}
	return mark, nil
}

// MarkKept says Redis holds every order record again, if nothing lost
// them (nor began another put-back) since the put-back of mark began; it
// reports whether it did (see mark_kept.lua).
func (r *Records) MarkKept(ctx context.Context, mark string) (bool, error) {
	n, err := markKeptScript.Run(ctx, r.rdb, []string{keyspace.OrderRecordsKept}, mark).Int()
	if err != nil {
		return false, fmt.Errorf("mark the order records kept: %w", err)
	}
	return n == 1, nil
}

// putArgsOf is putScript's ARGV for rec.
func putArgsOf(rec Record, ttl time.Duration) []any {
	return []any{rec.Owner, rec.Fingerprint, rec.Queue, rec.SKU, rec.Quantity, string(rec.Status), rec.Reason, rec.PaymentID,
		int(ttl.Seconds())}
}

// RecordOf is the record of an order as the store has it.
func RecordOf(o Order) Record {
	return Record{ID: o.ID, Owner: o.User, Fingerprint: Fingerprint(o.SKU, o.Quantity), Queue: o.Queue,
		SKU: o.SKU, Quantity: o.Quantity, Status: o.Status, Reason: o.Reason, PaymentID: o.PaymentID}
}

func recordOf(id string, f []string) Record {
	q, _ := strconv.Atoi(f[4])
	return Record{ID: id, Owner: f[0], Fingerprint: f[1], Queue: f[2], SKU: f[3], Quantity: q,
		Status: Status(f[5]), Reason: f[6], PaymentID: f[7]}
}
