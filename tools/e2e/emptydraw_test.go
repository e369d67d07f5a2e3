package e2e

import (
	"fmt"
	"testing"
	"time"

	"usher/internal/testenv"
)

// A drop nobody pre-queued for still opens: its lottery is drawn (nobody
// placed) and its seed revealed at the opening, and the first shopper
// after it, alone in the line, is READY in their join's own answer. The
// admitter waited for its line to have applied the queue's last join
// before drawing — and a queue with no join at all never got there: the
// commitment stayed unopened and the first shopper after the opening
// waited for a draw their own join set off.
func TestADropNobodyPreQueuedForOpensAndDraws(t *testing.T) {
	t.Parallel()
	r := newDropRig(t)
	opens := time.Now().Add(2 * time.Second)
	r.configure(`{"targetActive": 5, "rateLimit": {"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 0}, "opensAt": "` +
		opens.UTC().Format(time.RFC3339Nano) + `"}`)
	testenv.Eventually(t, 10*time.Second, func() error {
		if lot := r.public()["lottery"].(map[string]any); lot["seed"] == nil {
			return fmt.Errorf("not drawn: %v", lot)
		}
		return nil
	}, "the empty pre-queue drawn and the seed revealed")
	if code, body := r.join("first-after-the-opening"); code != 202 || body["status"] != "READY" {
		t.Fatalf("the first join after the opening, alone = %d %v; want 202 READY at once", code, body)
	}
}
