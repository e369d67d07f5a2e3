package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"usher/internal/keyspace"
	"usher/internal/testenv"
)

// The end of a line — a drop's closesAt passing, or an operator's state
// closed — ends it for those still waiting, not the turn of a shopper
// already admitted: as at Queue-it and Cloudflare's waiting room, she keeps
// her token's window and may order until the token expires (docs/api.md,
// "Scheduled drops" and the admin state row) — the gateway takes the order,
// the order worker pays it — while those in line are told CLOSED with the
// reason, new joins are 410 and nobody more is admitted.
func TestAShopperAdmittedBeforeTheLineEndsOrdersAfterIt(t *testing.T) {
	t.Parallel()
	env := stackEnv(t, "PGSIM_LATENCY_MEAN_MS", "5")
	gw, adm, ow := env["USHER_GATEWAY_ADDR"], env["USHER_ADMITTER_ADDR"], env["USHER_ORDERWORKER_ADDR"]
	for _, name := range []string{"pgsim", "gateway", "admitter", "orderworker"} {
		start(t, name, env)
	}
	base := "http://" + gw
	waitReady(t, 20*time.Second, base, "http://"+adm, "http://"+ow)
	admin := map[string]string{"Authorization": "Bearer e2e-admin"}
	for _, end := range []struct {
		name   string
		open   string                                    // the queue's settings while ann is admitted
		end    func(put func(settings string)) time.Time // ends the line; returns when it ended
		reason string                                    // CLOSED's reason; the 410's problem is queue-<problem>
		closed func(admin map[string]any) bool           // the admin view once the line has ended
		prob   string
	}{{
		// closesAt an hour ahead until ann is admitted, then in half a
		// second: however slow the machine, she is admitted before it.
		name: "closesAt", open: `"closesAt": "` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano) + `"`,
		end: func(put func(string)) time.Time {
			at := time.Now().Add(500 * time.Millisecond).UTC()
			put(`"closesAt": "` + at.Format(time.RFC3339Nano) + `"`)
			return at
		},
		reason: "ended", prob: "queue-ended",
		closed: func(v map[string]any) bool { return v["state"] == "closed" && v["closedReason"] == "ended" },
	}, {
		name: "by hand", open: `"state": "open"`,
		end: func(put func(string)) time.Time {
			put(`"state": "closed"`)
			return time.Now()
		},
		reason: "closed", prob: "queue-closed",
		closed: func(v map[string]any) bool { return v["state"] == "closed" },
	}} {
		t.Run(end.name, func(t *testing.T) {
			q := testenv.Name(t)
			sku := q + "-sku" // a SKU of its own: ann may buy one unit of each (maxPerUser)
			if code, body := call(t, "PUT", base+"/v1/admin/stock/"+sku, `{"available": 5}`, admin); code >= 300 {
				t.Fatalf("stock = %d %v", code, body)
			}
			put := func(settings string, want int) {
				t.Helper()
				cfg := `{"targetActive": 1, "tickMs": 20, "tokenTtlSeconds": 300, "sku": "` + sku + `", ` + settings + `}`
				if code, body := call(t, "PUT", base+"/v1/admin/queues/"+q, cfg, admin); code != want {
					t.Fatalf("PUT queue %s = %d %v, want %d", settings, code, body, want)
				}
			}
			put(end.open, 201)
			tickets := map[string]string{}
			for _, u := range []string{"ann", "ben"} {
				code, body := call(t, "POST", base+"/v1/queues/"+q+"/tickets", "", map[string]string{"X-User-Id": u})
				if code != 202 {
					t.Fatalf("join %s = %d %v", u, code, body)
				}
				tickets[u] = body["ticket"].(string)
			}
			poll := func(u string) map[string]any {
				_, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tickets[u], "", nil)
				return body
			}
			var token string
			testenv.Eventually(t, 10*time.Second, func() bool {
				body := poll("ann")
				token, _ = body["token"].(string)
				return body["status"] == "READY"
			}, "ann READY")
			if body := poll("ben"); body["status"] != "WAITING" {
				t.Fatalf("ben = %v, want WAITING while ann holds the one slot", body)
			}

			ended := end.end(func(s string) { put(s, 200) })
			testenv.Eventually(t, 15*time.Second, func() bool {
				_, v := call(t, "GET", base+"/v1/admin/queues/"+q, "", admin)
				return end.closed(v) && poll("ben")["status"] == "CLOSED"
			}, "the queue closed and ben told so")
			if body := poll("ben"); body["reason"] != end.reason {
				t.Errorf("ben after the end = %v, want CLOSED, reason %s", body, end.reason)
			}
			code, body := call(t, "POST", base+"/v1/queues/"+q+"/tickets", "", map[string]string{"X-User-Id": "cat"})
			if typ, _ := body["type"].(string); code != 410 || !strings.HasSuffix(typ, "/"+end.prob) {
				t.Errorf("a join after the end = %d %v, want 410 %s", code, body, end.prob)
			}

			// Ann, admitted before the end, is READY still with the same
			// token, and her order after it is taken and paid.
			if body := poll("ann"); body["status"] != "READY" || body["token"] != token {
				t.Fatalf("ann after the end = %v, want READY with the token she was given", body)
			}
			if !time.Now().After(ended) {
				t.Fatalf("the order would not come after the end (%s)", ended)
			}
			code, order := call(t, "POST", base+"/v1/orders", `{"sku": "`+sku+`", "quantity": 1}`,
				map[string]string{"X-User-Id": "ann", "Authorization": "Bearer " + token})
			if code != 202 {
				t.Fatalf("ann's order after the end = %d %v, want 202", code, order)
			}
			id, _ := order["orderId"].(string)
			// Until it is final, then PAID: a refusal fails with its reason.
			var final map[string]any
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				_, final = call(t, "GET", base+"/v1/orders/"+id, "", map[string]string{"X-User-Id": "ann"})
				if s := final["status"]; s == "PAID" || s == "FAILED" || s == "REJECTED" || time.Now().After(deadline) {
					break
				}
			}
			if final["status"] != "PAID" {
				t.Fatalf("ann's order after the end = %v, want PAID", final)
			}
			if body := poll("ann"); body["status"] != "USED" {
				t.Errorf("ann's ticket after her order = %v, want USED", body)
			}
			if body := poll("ben"); body["status"] != "CLOSED" {
				t.Errorf("ben once ann's slot freed = %v, want CLOSED still: nobody is admitted after the end", body)
			}

			// Ended, and nobody holds a slot: the queue may go, for good
			// (docs/api.md, "Deleting a queue"), and its line leaves Redis.
			testenv.Eventually(t, 15*time.Second, func() error {
				if code, body := call(t, "DELETE", base+"/v1/admin/queues/"+q, "", admin); code != 204 {
					return fmt.Errorf("DELETE = %d %v", code, body)
				}
				return nil
			}, "the ended queue deleted")
			if code, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tickets["ben"], "", nil); code != 404 {
				t.Errorf("ben's poll after the deletion = %d %v, want 404", code, body)
			}
			code, body = call(t, "PUT", base+"/v1/admin/queues/"+q, `{"targetActive": 1}`, admin)
			if typ, _ := body["type"].(string); code != 409 || !strings.HasSuffix(typ, "/queue-retired") {
				t.Errorf("PUT of the deleted queue's name = %d %v, want 409 queue-retired", code, body)
			}
			rdb := testenv.RedisAt(t, env["USHER_REDIS_URL"])
			testenv.Eventually(t, 10*time.Second, func() error {
				keys, err := rdb.Keys(context.Background(), keyspace.Of(q).Pattern()).Result()
				if err == nil && len(keys) > 0 {
					err = fmt.Errorf("left in Redis: %v", keys)
				}
				return err
			}, "the deleted queue's line removed by the admitter")
		})
	}
}
