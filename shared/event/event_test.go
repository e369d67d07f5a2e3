package event_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"usher/shared/event"
)

var update = flag.Bool("update", false, "rewrite the golden files")

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
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, got, "", "  "); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			path := filepath.Join("testdata", tt.name+".golden.json")
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
				t.Errorf("%s changed:\n got %s\nwant %s", tt.name, pretty.Bytes(), want)
			}
		})
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
