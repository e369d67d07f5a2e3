package claims_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/keyspace"
	"usher/internal/testenv"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/linetest"
	"usher/internal/waitqueue/roles"
)

// What the stock-aware tick counts of the slots held — the index every
// script keeps beside the active set — is at every step what the entries'
// records say, whatever happens to them: admissions, claims, redemptions,
// placed and final orders, releases, leaves, expiries, replays of the
// admissions and orders streams, and an index lost or never written (the
// next stock-aware tick rebuilds it). A random walk of 600 steps.
func TestTheHeldIndexIsWhatTheRecordsSay(t *testing.T) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	s := roles.New(rdb)
	q := testenv.Name(t)
	k := keyspace.Of(q)
	us := linetest.Users(80)
	linetest.JoinAll(t, s, q, us...)
	if err := s.SetStock(ctx, q, false, waitqueue.StockLevel{SKU: "s1", Available: 40, Version: 1},
		waitqueue.StockLevel{SKU: "s2", Available: 40, Version: 1}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var ordersAt, admissionsAt uint64 // the streams' last applied sequences
	orders := map[uint64]string{}     // entry seq → its order id
	pick := func(seqs []uint64) uint64 { return seqs[rng.IntN(len(seqs))] }
	for step := range 600 {
		active, err := rdb.ZRange(ctx, k.Active(), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		var admitted, used []uint64
		for _, m := range active {
			seq, _ := strconv.ParseUint(m, 10, 64)
			e, err := s.Poll(ctx, q, seq)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case e.Status == waitqueue.Admitted:
				admitted = append(admitted, seq)
			case e.Status == waitqueue.Used && orders[seq] != "":
				used = append(used, seq)
			}
		}
		op := rng.IntN(10)
		did := ""
		switch {
		case op <= 1:
			ttl := time.Minute
			if rng.IntN(3) == 0 {
				ttl = 150 * time.Millisecond // expires a few steps on
			}
			time.Sleep(2 * time.Millisecond)
			_, err = s.Admit(ctx, q, waitqueue.Tick{Epoch: epoch, TargetActive: 30, MaxAdmitPerTick: 1 + rng.IntN(4),
				TickLength: time.Millisecond, TokenTTL: ttl, StockAware: rng.IntN(2) == 0})
			did = "tick"
		case op == 2 && len(admitted) > 0:
			seq := pick(admitted)
			e, _ := s.Poll(ctx, q, seq)
			id := fmt.Sprintf("o%d", step)
			_, err = s.Claim(ctx, q, seq, waitqueue.Order{ID: id, TokenID: e.TokenID, User: e.User,
				SKU: []string{"s1", "s2"}[rng.IntN(2)], Quantity: 1 + rng.IntN(3)}, time.Minute)
			orders[seq] = id
			did = "claim " + strconv.FormatUint(seq, 10)
		case op == 3 && len(admitted) > 0:
			seq := pick(admitted)
			e, _ := s.Poll(ctx, q, seq)
			id := fmt.Sprintf("o%d", step)
			_, err = s.Redeem(ctx, q, seq, e.TokenID, id, time.Now().Add(time.Minute))
			orders[seq] = id
			did = "redeem " + strconv.FormatUint(seq, 10)
		case op == 4 && len(used) > 0:
			seq := pick(used)
			err = s.Placed(ctx, q, seq, orders[seq], waitqueue.StockLevel{SKU: "s1", Available: 30, Version: int64(step + 2)})
			did = "placed " + strconv.FormatUint(seq, 10)
		case op == 5 && len(used) > 0:
			seq := pick(used)
			_, err = s.Release(ctx, q, seq, orders[seq])
			did = "release " + strconv.FormatUint(seq, 10)
		case op == 6 && len(active) > 0:
			seq, _ := strconv.ParseUint(active[rng.IntN(len(active))], 10, 64)
			// A leave keeps its slot until it is recorded; half are.
			_, _, err = s.Leave(ctx, q, seq, us[seq-1])
			if err == nil && rng.IntN(2) == 0 {
				err = s.LeaveRecorded(ctx, q, waitqueue.UnrecordedLeave{Seq: seq, User: us[seq-1]})
			}
			did = "leave " + strconv.FormatUint(seq, 10)
		case op == 7 && len(admitted)+len(used) > 0:
			// The orders stream replayed: a request (maybe one this Redis
			// never saw), then perhaps its final event.
			seq := pick(append(admitted, used...))
			e, _ := s.Poll(ctx, q, seq)
			id := orders[seq]
			if id == "" {
				id = fmt.Sprintf("r%d", step)
				orders[seq] = id
			}
			ev := waitqueue.OrderEvent{StreamSeq: ordersAt + 1, Entry: seq, TokenID: e.TokenID, OrderID: id, User: e.User,
				RequestedAt: time.Now(), SKU: "s2", Quantity: 2}
			evs := []waitqueue.OrderEvent{ev}
			if rng.IntN(2) == 0 {
				fin := ev
				fin.StreamSeq, fin.Final, fin.Paid = ev.StreamSeq+1, true, true
				evs = append(evs, fin)
			}
			_, err = s.ApplyOrders(ctx, q, "orders-1", ordersAt, time.Minute, evs)
			ordersAt += uint64(len(evs))
			did = "replay orders " + strconv.FormatUint(seq, 10)
		case op == 8:
			// The admissions stream replayed: an admission this Redis lost
			// (a waiting entry) or already made.
			waiting, _ := rdb.ZRange(ctx, k.Waiting(), 0, 0).Result()
			if len(waiting) == 0 {
				break
			}
			seq, _ := strconv.ParseUint(waiting[0], 10, 64)
			now := time.Now()
			_, err = s.ApplyAdmissions(ctx, q, "admissions-1", admissionsAt, []waitqueue.AdmissionEvent{{StreamSeq: admissionsAt + 1,
				Entry: seq, User: us[seq-1], TokenID: q + ":" + epoch + ":" + waiting[0], ReadyAt: now, ExpiresAt: now.Add(time.Minute)}})
			admissionsAt++
			did = "replay admission " + waiting[0]
		case op == 9 && rng.IntN(4) == 0:
			did = "index lost, then a stock-aware tick"
			if err = rdb.Del(ctx, k.Held()).Err(); err == nil { // lost, or written before the index existed
				time.Sleep(2 * time.Millisecond)
				_, err = s.Admit(ctx, q, waitqueue.Tick{Epoch: epoch, TargetActive: 30, TickLength: time.Millisecond,
					TokenTTL: time.Minute, StockAware: true})
			}
		}
		if err != nil {
			t.Fatalf("step %d (%s): %v", step, did, err)
		}
		if got, want := linetest.HeldIndex(t, rdb, k), heldFromRecords(t, rdb, k); !maps.Equal(got, want) {
			t.Fatalf("step %d (%s): the index holds\n%v\nthe records say\n%v", step, did, got, want)
		}
	}
}

// heldFromRecords is what each entry in the active set holds, from its
// record, as the stock-aware tick counted it before the index: admitted,
// one unit; used by an order not placed yet, its quantity of its SKU
// (claimed); placed, its quantity (pending); anything else, nothing.
func heldFromRecords(t *testing.T, rdb redis.UniversalClient, k keyspace.Queue) map[string]string {
	t.Helper()
	ctx := context.Background()
	active, err := rdb.ZRange(ctx, k.Active(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range active {
		seq, _ := strconv.ParseUint(m, 10, 64)
		f, err := rdb.HMGet(ctx, k.Entry(seq), "status", "placed", "qty", "sku").Result()
		if err != nil {
			t.Fatal(err)
		}
		str := func(v any, def string) string {
			if s, ok := v.(string); ok {
				return s
			}
			return def
		}
		switch str(f[0], "") {
		case "admitted":
			out[m] = "a"
		case "used":
			kind := "c"
			if f[1] != nil {
				kind = "p"
			}
			out[m] = kind + ":" + str(f[2], "1") + ":" + str(f[3], "")
		default:
			out[m] = "x"
		}
	}
	return out
}
