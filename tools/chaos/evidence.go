package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"usher/internal/event"
	"usher/internal/keyspace"
)

// evidence is everything the checks judge, gathered after the run settled
// from independent records: the load's journal (what shoppers were told),
// the JetStream streams (what was recorded), Redis (the line as it stands),
// PostgreSQL (orders and stock), pgsim (what was charged), and the samples
// the harness took while the run went on.
type evidence struct {
	Queues  []queueSpec
	Journal []record

	// From the streams, per queue, in stream order.
	Joins      map[string][]streamJoin
	Leaves     map[string][]streamLeave
	Admissions map[string][]admission
	// Order events (all queues), in stream order.
	OrderEvents []orderEvent

	// From Redis at the end: who is waiting, and the record status of
	// every joined sequence that was neither admitted nor left.
	Waiting     map[string]map[uint64]bool
	EntryStatus map[string]map[uint64]string
	RedisErr    string

	// From PostgreSQL at the end.
	Orders []dbOrder
	Stock  map[string]int64
	DBErr  string

	// From Redis at the end: the status each final order's record says
	// (what GET /v1/orders/{id} answers; "" when Redis holds none).
	Records    map[string]string
	RecordsErr string

	// From pgsim at the end: captures per order id (idempotency key).
	Charges     map[string]charge
	ChargeTotal chargeTotals
	PgsimErr    string

	// Taken while the run went on.
	Samples []sample

	Timeline timeline
	Settled  settleState
	Audits   []auditResult
}

type streamJoin struct {
	Seq  uint64 `json:"seq"`
	User string `json:"user"`
	// Prev is the entry the gateway saw the user's last one end at (0:
	// none): two joins of a user with the same Prev are one attempt, whose
	// place is the earlier.
	Prev   uint64    `json:"prev,omitempty"`
	Stored time.Time `json:"stored"`
}

type streamLeave struct {
	Seq    uint64    `json:"seq"` // the entry that left
	User   string    `json:"user"`
	Stored time.Time `json:"stored"`
}

type admission struct {
	StreamSeq uint64    `json:"streamSeq"`
	Seq       uint64    `json:"seq"`
	User      string    `json:"user"`
	TokenID   string    `json:"tokenId"`
	ReadyAt   time.Time `json:"readyAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	Stored    time.Time `json:"stored"`
}

type orderEvent struct {
	Type    string    `json:"type"` // requested, completed, failed (the subject's kind)
	OrderID string    `json:"orderId"`
	TokenID string    `json:"tokenId"`
	Queue   string    `json:"queue"`
	Status  string    `json:"status"`
	Stored  time.Time `json:"stored"`
}

type dbOrder struct {
	ID       string    `json:"id"`
	TokenID  string    `json:"tokenId"`
	Queue    string    `json:"queue"`
	User     string    `json:"user"`
	SKU      string    `json:"sku"`
	Quantity int64     `json:"quantity"`
	Status   string    `json:"status"`
	Reason   string    `json:"reason"`
	Payment  string    `json:"paymentId"`
	Deadline time.Time `json:"deadline"`
}

// charge is what pgsim holds for one idempotency key.
type charge struct {
	Captures int  `json:"captures"`
	Voided   bool `json:"voided"`
}

type chargeTotals struct {
	Total     int `json:"total"`
	Keys      int `json:"keys"`
	MaxPerKey int `json:"maxPerKey"`
}

// sample is one look at a queue's line in Redis during the run.
type sample struct {
	At      time.Time `json:"at"`
	Queue   string    `json:"queue"`
	Active  int64     `json:"active"`
	Waiting int64     `json:"waiting"`
	// Behind: the line is not current — its last tick admitted nobody
	// because it had not applied every admission and order event the
	// streams hold, or no tick ran since Redis lost the line's state. Read
	// in one MULTI with the counts.
	Behind bool `json:"behind,omitempty"`
}

// timeline is when the harness did what.
type timeline struct {
	Start    time.Time `json:"start"`    // load started
	Inject   time.Time `json:"inject"`   // fault injected
	Heal     time.Time `json:"heal"`     // fault undone (process restarted, partition healed…)
	LoadStop time.Time `json:"loadStop"` // no more joins
	// Steps are when each step of a fault made of many began (a rolling
	// upgrade's restarts, one copy after another): a dip is judged from
	// the step it followed, as a single fault's dip is from the fault.
	Steps []time.Time `json:"steps,omitempty"`
	// RecoverFromHeal: the fault's nature pauses admission by design while
	// it lasts (payment outage: back-pressure), so recovery is judged from
	// the heal, not the injection.
	RecoverFromHeal bool `json:"recoverFromHeal"`
	// Bound is how long recovery may take (see recoveryBound and
	// failoverBound).
	Bound time.Duration `json:"recoveryBound"`
	// PartialRedisLoss: the fault loses Redis's last writes on one shard
	// and not the rest (a failover, an AOF cut back), which the order
	// workers' marker does not see (docs/api.md, "Orders").
	PartialRedisLoss bool `json:"partialRedisLoss"`
}

// settleState is whether the pipeline drained after the load stopped.
type settleState struct {
	Drained bool          `json:"drained"`
	Took    time.Duration `json:"took"`
	Detail  string        `json:"detail,omitempty"` // what was still in flight at the deadline
}

type auditResult struct {
	Queue  string `json:"queue"`
	Clean  bool   `json:"clean"`
	Output string `json:"output"`
	Err    string `json:"err,omitempty"`
}

// sampler looks at every queue's active and waiting counts each period.
func sampler(ctx context.Context, rdb redis.UniversalClient, queues []queueSpec, period time.Duration, out *[]sample, mu *sync.Mutex) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, q := range queues {
			// One atomic read (the keys share the queue's hash slot): the
			// counts and whether the line was current when they were taken.
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			var a, w *redis.IntCmd
			var behind *redis.StringCmd
			k := keyspace.Of(q.Name)
			_, err := rdb.TxPipelined(cctx, func(p redis.Pipeliner) error {
				a = p.ZCard(cctx, k.Active())
				w = p.ZCard(cctx, k.Waiting())
				behind = p.HGet(cctx, k.Stats(), "behind")
				return nil
			})
			cancel()
			if err != nil && !errors.Is(err, redis.Nil) || a.Err() != nil || w.Err() != nil {
				continue // Redis is what the fault took away; nothing to see
			}
			mu.Lock()
			*out = append(*out, sample{At: time.Now(), Queue: q.Name, Active: a.Val(), Waiting: w.Val(), Behind: behind.Val() != "0"})
			mu.Unlock()
		}
	}
}

// envelope is the part of a CloudEvents envelope the harness reads.
type envelope struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// readStream calls f with every message of stream matching subjects, in
// stream order, up to the last one stored when it began; it fails rather
// than return fewer.
//
// It reads through an ephemeral, unacknowledged consumer of its own. An R1
// consumer sits on one replica of the stream, and after a node's kill that
// may be one that has not caught up yet: it delivers nothing while it lags,
// for a minute or more. So a consumer that delivers nothing for
// stallAfter is replaced by a new one from just after the last message read.
func readStream(ctx context.Context, js jetstream.JetStream, stream string, subjects []string, f func(jetstream.Msg, *jetstream.MsgMetadata) error) error {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s info: %w", stream, err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	r := &stallingReader{st: st, stream: stream, subjects: subjects}
	defer r.drop()
	deadline := time.Now().Add(60 * time.Second)
	for first := true; first || r.got < r.want; first = false {
		if time.Now().After(deadline) {
			return fmt.Errorf("stream %s: read %d of %d messages matching %v", stream, r.got, r.want, subjects)
		}
		if err := r.consumer(ctx, first); err != nil {
			return err
		}
		// NoWait: what is stored now, without waiting for a full batch.
		batch, err := r.cons.FetchNoWait(2000)
		if err != nil {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		n, err := r.take(batch, f)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if n == 0 && r.got < r.want {
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
	return nil
}

// stallAfter is how long a consumer may deliver nothing before another
// takes its place.
const stallAfter = 10 * time.Second

// stallingReader is readStream's consumer and count: it replaces a
// consumer that stalls.
type stallingReader struct {
	st       jetstream.Stream
	stream   string
	subjects []string
	cons     jetstream.Consumer
	// want is every message that matched when the first consumer was
	// made, and no fewer: a short read would make admitted shoppers look
	// lost.
	want     uint64
	got      uint64
	last     uint64 // the stream sequence of the last message read
	progress time.Time
}

// consumer makes a consumer from just after the last message read, when
// there is none or the one there is has stalled (a lagging replica's).
// The first one says how many messages to read.
func (r *stallingReader) consumer(ctx context.Context, first bool) error {
	if r.cons != nil && time.Since(r.progress) > stallAfter {
		r.drop()
	}
	if r.cons != nil {
		return nil
	}
	cfg := jetstream.ConsumerConfig{
		FilterSubjects: r.subjects, AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute, MemoryStorage: true, Replicas: 1,
	}
	if r.last > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, r.last+1
	}
	cons, err := r.st.CreateConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("stream %s consumer: %w", r.stream, err)
	}
	r.cons, r.progress = cons, time.Now()
	if first {
		r.want = cons.CachedInfo().NumPending
	}
	return nil
}

func (r *stallingReader) drop() {
	if r.cons != nil {
		_ = r.st.DeleteConsumer(context.Background(), r.cons.CachedInfo().Name)
		r.cons = nil
	}
}

// take hands batch's messages to f, up to want, and returns how many.
func (r *stallingReader) take(batch jetstream.MessageBatch, f func(jetstream.Msg, *jetstream.MsgMetadata) error) (int, error) {
	n := 0
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			return n, err
		}
		if r.got == r.want {
			break // stored after the first consumer was made
		}
		r.got, r.last, n = r.got+1, md.Sequence.Stream, n+1
		if err := f(m, md); err != nil {
			return n, err
		}
	}
	if n > 0 {
		r.progress = time.Now()
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
		return n, fmt.Errorf("stream %s fetch: %w", r.stream, err)
	}
	return n, nil
}

// gatherStreams reads joins, leaves, admissions and order events.
func gatherStreams(ctx context.Context, js jetstream.JetStream, ev *evidence) error {
	ev.Joins, ev.Leaves, ev.Admissions = map[string][]streamJoin{}, map[string][]streamLeave{}, map[string][]admission{}
	for _, q := range ev.Queues {
		var places event.Places
		var joins []event.Joined
		err := readStream(ctx, js, event.StreamEntries, []string{event.EnterSubject(q.Name), event.LeaveSubject(q.Name)}, func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			if event.IsEnter(m.Subject()) {
				_, js, grouped, err := event.UnmarshalEnter(m.Data(), joins)
				joins = js
				if err != nil {
					return nil
				}
				for i, j := range joins {
					ev.Joins[q.Name] = append(ev.Joins[q.Name], streamJoin{Seq: places.Of(md.Sequence.Stream, i, grouped), User: j.User, Prev: j.Prev, Stored: md.Timestamp})
				}
				return nil
			}
			var env envelope
			if json.Unmarshal(m.Data(), &env) != nil {
				return nil
			}
			var d struct {
				User string `json:"user"`
				Seq  uint64 `json:"seq"`
			}
			_ = json.Unmarshal(env.Data, &d)
			ev.Leaves[q.Name] = append(ev.Leaves[q.Name], streamLeave{Seq: d.Seq, User: d.User, Stored: md.Timestamp})
			return nil
		})
		if err != nil {
			return err
		}
		err = readStream(ctx, js, event.StreamAdmissions, []string{event.AdmittedSubject(q.Name)}, func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
			var env envelope
			if json.Unmarshal(m.Data(), &env) != nil {
				return nil
			}
			var a admission
			_ = json.Unmarshal(env.Data, &a)
			a.StreamSeq, a.Stored = md.Sequence.Stream, md.Timestamp
			ev.Admissions[q.Name] = append(ev.Admissions[q.Name], a)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return readStream(ctx, js, event.StreamOrders, []string{event.OrderSubjects(event.All)}, func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
		var env envelope
		if json.Unmarshal(m.Data(), &env) != nil {
			return nil
		}
		var o orderEvent
		_ = json.Unmarshal(env.Data, &o)
		switch m.Subject() { // the subject's kind
		case event.OrderRequestedSubject(o.Queue):
			o.Type = "requested"
		case event.OrderCompletedSubject(o.Queue):
			o.Type = "completed"
		case event.OrderFailedSubject(o.Queue):
			o.Type = "failed"
		}
		o.Stored = md.Timestamp
		ev.OrderEvents = append(ev.OrderEvents, o)
		return nil
	})
}

// gatherRedis reads the waiting line of every queue and the record status
// of the joined sequences that were neither admitted nor left.
func gatherRedis(ctx context.Context, rdb redis.UniversalClient, ev *evidence) error {
	ev.Waiting, ev.EntryStatus = map[string]map[uint64]bool{}, map[string]map[uint64]string{}
	admitted := map[string]map[uint64]bool{}
	for q, as := range ev.Admissions {
		admitted[q] = map[uint64]bool{}
		for _, a := range as {
			admitted[q][a.Seq] = true
		}
	}
	for _, q := range ev.Queues {
		members, err := rdb.ZRange(ctx, keyspace.Of(q.Name).Waiting(), 0, -1).Result()
		if err != nil {
			return fmt.Errorf("waiting line of %s: %w", q.Name, err)
		}
		w := map[uint64]bool{}
		for _, m := range members {
			if n, err := strconv.ParseUint(m, 10, 64); err == nil {
				w[n] = true
			}
		}
		ev.Waiting[q.Name] = w
		st := map[uint64]string{}
		for _, r := range ev.Journal {
			if r.Kind != recJoin || r.Queue != q.Name || r.Seq == 0 || admitted[q.Name][r.Seq] || w[r.Seq] {
				continue
			}
			if _, seen := st[r.Seq]; seen {
				continue
			}
			s, err := rdb.HGet(ctx, keyspace.Of(q.Name).Entry(r.Seq), "status").Result()
			switch {
			case errors.Is(err, redis.Nil):
				s = "(no record)"
			case err != nil:
				return err
			}
			st[r.Seq] = s
		}
		ev.EntryStatus[q.Name] = st
	}
	return nil
}

// gatherPostgres reads every order and the stock of every SKU.
func gatherPostgres(ctx context.Context, url string, ev *evidence) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id, token_id, queue, user_id, sku, quantity, status, reason, payment_id, deadline FROM orders`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var o dbOrder
		if err := rows.Scan(&o.ID, &o.TokenID, &o.Queue, &o.User, &o.SKU, &o.Quantity, &o.Status, &o.Reason, &o.Payment, &o.Deadline); err != nil {
			rows.Close()
			return err
		}
		ev.Orders = append(ev.Orders, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	ev.Stock = map[string]int64{}
	rows, err = conn.Query(ctx, `SELECT sku, available FROM stock`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var sku string
		var n int64
		if err := rows.Scan(&sku, &n); err != nil {
			return err
		}
		ev.Stock[sku] = n
	}
	return rows.Err()
}

// gatherRecords reads the Redis record of every final order PostgreSQL
// holds.
func gatherRecords(ctx context.Context, rdb redis.UniversalClient, ev *evidence) error {
	ev.Records = map[string]string{}
	var ids []string
	for _, o := range ev.Orders {
		if o.Status != "PENDING" {
			ids = append(ids, o.ID)
		}
	}
	cmds := make([]*redis.StringCmd, len(ids))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGet(ctx, keyspace.OrderRecord(id), "status")
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("order records: %w", err)
	}
	for i, id := range ids {
		st, err := cmds[i].Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("order record %s: %w", id, err)
		}
		ev.Records[id] = st
	}
	return nil
}

// gatherPgsim reads pgsim's ledger: its totals and every payment, by
// idempotency key (the order id), captured or voided.
func gatherPgsim(ctx context.Context, base, token string, ev *evidence) error {
	client := &http.Client{Timeout: 10 * time.Second}
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/admin/charges", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return fmt.Errorf("GET /v1/admin/charges: %d %s", res.StatusCode, b)
	}
	var report struct {
		chargeTotals
		Payments []struct {
			Key    string `json:"idempotencyKey"`
			Status string `json:"status"`
		} `json:"payments"`
	}
	if err := json.Unmarshal(b, &report); err != nil {
		return fmt.Errorf("GET /v1/admin/charges: %w", err)
	}
	ev.ChargeTotal = report.chargeTotals
	ev.Charges = map[string]charge{}
	for _, p := range report.Payments {
		c := ev.Charges[p.Key]
		c.Captures++
		c.Voided = c.Voided || p.Status == "voided"
		ev.Charges[p.Key] = c
	}
	return nil
}
