package event_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"usher/internal/catalog"
	"usher/internal/event"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// seed and commitment are a scheduled drop's lottery seed and its
// SHA-256, as the draw reveals them.
const (
	seed       = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	commitment = "4884fdaafea47c29fea7159d0daddd9c085d6200e1359e85bb81736af6b7c837"
)

// The wire format is a contract with downstream services: each payload
// version is pinned by a golden file.
func TestGolden(t *testing.T) {
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		id, typ string
		subject string
		data    any
	}{
		{"joined.v1", "demo/alice/0", event.TypeJoined, "alice", event.Joined{Queue: "demo", User: "alice", JoinedAt: at}},
		{"joins.v2", "joins/demo/gw-hopf7x50rl/42", event.TypeJoins, "demo", event.Joins{Queue: "demo", Joins: []event.Join{
			{User: "alice", JoinedAt: at},
			{User: "bob", JoinedAt: at.Add(300 * time.Microsecond), Prev: 17},
			{User: "carol", JoinedAt: at.Add(700 * time.Microsecond), PreQueue: true},
			{User: "dave", JoinedAt: at.Add(900 * time.Microsecond), Priority: true},
		}}},
		{"admitted.v1", "demo:42", event.TypeAdmitted, "alice", event.Admitted{
			Queue: "demo", User: "alice", Seq: 42, TokenID: "demo:42",
			ReadyAt: at.Add(37 * time.Millisecond), ExpiresAt: at.Add(300*time.Second + 37*time.Millisecond),
		}},
		{"order.requested.v1", "ord_abc", event.TypeOrderRequested, "alice", event.OrderRequested{
			OrderID: "ord_abc", TokenID: "demo:42", Queue: "demo", User: "alice", SKU: "demo-sku", Quantity: 1,
			TokenExpiresAt: at.Add(300 * time.Second), TokenReadyAt: at.Add(-42 * time.Second), RequestedAt: at,
		}},
		{"order.completed.v1", "completed/ord_abc", event.TypeOrderCompleted, "alice", event.OrderFinished{
			OrderID: "ord_abc", TokenID: "demo:42", Queue: "demo", User: "alice", SKU: "demo-sku", Quantity: 1,
			Status: "PAID", PaymentID: "pay_0123",
		}},
		{"order.failed.v1", "failed/ord_abc", event.TypeOrderFailed, "alice", event.OrderFinished{
			OrderID: "ord_abc", TokenID: "demo:42", Queue: "demo", User: "alice", SKU: "demo-sku", Quantity: 1,
			Status: "REJECTED", Reason: "sold_out",
		}},
		{"left.v1", "leave/demo/42", event.TypeLeft, "alice", event.Left{Queue: "demo", User: "alice", Seq: 42}},
		{"left.v1.abandoned", "abandoned/demo/hopf7x50rl/42", event.TypeLeft, "alice", event.Left{
			Queue: "demo", User: "alice", Seq: 42, Reason: "abandoned",
		}},
		{"lottery.drawn.v1", "lottery/demo/" + commitment, event.TypeLotteryDrawn, "demo", event.LotteryDrawn{
			Queue: "demo", Seed: seed, Commitment: commitment, OpensAt: at.Add(-time.Second),
			Entries: 8412, EntriesCursor: 8420, OrderDigest: "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03",
		}},
		{"ops.limit_changed.v1", "limit/demo/1795942800", event.TypeLimitChanged, "demo", event.LimitChanged{
			Queue: "demo", Limit: 28, Previous: 40, Reason: "latency", Min: 5, Max: 160, Window: 1795942800, WindowMs: 1000,
			Orders: 131, LatencyMs: 412.5, BaselineMs: 251.25, Holds: 262,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := event.Marshal(tt.id, tt.typ, tt.subject, at, tt.data)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tt.name, got)
		})
	}
}

// A configuration change is recorded as the gateway and the admitter
// write it: through NewConfigChanged, with the queue's configuration as
// the admin API shows it (Redacted: a lottery not drawn yet shows its
// commitment, never its seed).
func TestGoldenConfigChanged(t *testing.T) {
	at := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	opens := at.Add(time.Hour)
	prev := catalog.Defaults("demo")
	prev.SKU = "demo-sku"
	cfg := prev
	cfg.TargetActive = 40
	cfg.OpensAt = &opens
	cfg.Lottery = &catalog.Lottery{
		Commitment: commitment,
		Seed:       seed,
	}
	prev, cfg = prev.Redacted(), cfg.Redacted()
	id, got, err := event.NewConfigChanged("demo", "ops@example.com", cfg, &prev, at)
	if err != nil {
		t.Fatal(err)
	}
	if want := "config/demo/" + strconv.FormatInt(at.UnixNano(), 10); id != want {
		t.Errorf("NewConfigChanged id = %q, want %q", id, want)
	}
	checkGolden(t, "ops.config_changed.v1", got)
}

// checkGolden compares an event, indented, with testdata/<name>.golden.json
// (rewritten first with -update).
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, got, "", "  "); err != nil {
		t.Fatal(err)
	}
	pretty.WriteByte('\n')
	path := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pretty.Bytes(), want) {
		t.Errorf("%s changed:\n got %s\nwant %s", name, pretty.Bytes(), want)
	}
}

func TestUnmarshalRejectsOtherTypes(t *testing.T) {
	b, err := event.Marshal("x", event.TypeJoined, "", time.Now(), event.Joined{Queue: "q", User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	var a event.Admitted
	if _, err := event.Unmarshal(b, event.TypeAdmitted, &a); err == nil {
		t.Fatal("Unmarshal(joined as admitted) = nil error, want ErrType")
	}
	var j event.Joined
	env, err := event.Unmarshal(b, event.TypeJoined, &j)
	if err != nil || j.User != "u" || env.SpecVersion != "1.0" {
		t.Fatalf("Unmarshal = %+v, %+v, %v", env, j, err)
	}
}
