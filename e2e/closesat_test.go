package e2e

import (
	"strings"
	"testing"
	"time"

	"usher/shared/testenv"
)

// A drop's closesAt ends the line, not the turn of a shopper already
// admitted: as at Queue-it and Cloudflare's waiting room, a shopper
// admitted before it keeps their token's window and may order until the
// token expires — the gateway takes the order, the order worker pays it —
// while those still in line are told CLOSED (ended), new joins are 410 and
// the admitter closes the queue in the catalog (README, "Scheduled drops").
func TestAShopperAdmittedBeforeClosesAtOrdersAfterIt(t *testing.T) {
	env := stackEnv(t, "PGSIM_LATENCY_MEAN_MS", "5")
	gw, adm, ow := env["USHER_GATEWAY_ADDR"], env["USHER_ADMITTER_ADDR"], env["USHER_ORDERWORKER_ADDR"]
	for _, name := range []string{"pgsim", "gateway", "admitter", "orderworker"} {
		start(t, name, env)
	}
	base := "http://" + gw
	waitReady(t, 20*time.Second, base, "http://"+adm, "http://"+ow)
	admin := map[string]string{"Authorization": "Bearer e2e-admin"}
	if code, body := call(t, "PUT", base+"/v1/admin/stock/e2e-close-sku", `{"available": 5}`, admin); code >= 300 {
		t.Fatalf("stock = %d %v", code, body)
	}
	q := testenv.Name(t)
	// The queue closes an hour from now until ann is admitted, then in
	// half a second: however slow the machine, she is admitted before it.
	putCloses := func(closesAt time.Time, want int) {
		t.Helper()
		cfg := `{"targetActive": 1, "tickMs": 20, "tokenTtlSeconds": 300, "sku": "e2e-close-sku", "closesAt": "` +
			closesAt.Format(time.RFC3339Nano) + `"}`
		if code, body := call(t, "PUT", base+"/v1/admin/queues/"+q, cfg, admin); code != want {
			t.Fatalf("PUT queue closing at %s = %d %v, want %d", closesAt, code, body, want)
		}
	}
	putCloses(time.Now().Add(time.Hour).UTC(), 201)
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
	closesAt := time.Now().Add(500 * time.Millisecond).UTC()
	putCloses(closesAt, 200)

	// closesAt passes, and the admitter closes the queue as ended.
	testenv.Eventually(t, 15*time.Second, func() bool {
		_, body := call(t, "GET", base+"/v1/admin/queues/"+q, "", admin)
		return body["state"] == "closed" && body["closedReason"] == "ended"
	}, "the queue closed as ended after closesAt")
	if body := poll("ben"); body["status"] != "CLOSED" || body["reason"] != "ended" {
		t.Errorf("ben after closesAt = %v, want CLOSED, reason ended", body)
	}
	code, body := call(t, "POST", base+"/v1/queues/"+q+"/tickets", "", map[string]string{"X-User-Id": "cat"})
	if typ, _ := body["type"].(string); code != 410 || !strings.HasSuffix(typ, "/queue-ended") {
		t.Errorf("a join after closesAt = %d %v, want 410 queue-ended", code, body)
	}

	// Ann, admitted before closesAt, is still READY with the same token,
	// and her order after closesAt is taken and paid.
	if body := poll("ann"); body["status"] != "READY" || body["token"] != token {
		t.Fatalf("ann after closesAt = %v, want READY with the token she was given", body)
	}
	if !time.Now().After(closesAt) {
		t.Fatalf("the order would not come after closesAt (%s)", closesAt)
	}
	code, order := call(t, "POST", base+"/v1/orders", `{"sku": "e2e-close-sku", "quantity": 1}`,
		map[string]string{"X-User-Id": "ann", "Authorization": "Bearer " + token})
	if code != 202 {
		t.Fatalf("ann's order after closesAt = %d %v, want 202", code, order)
	}
	id, _ := order["orderId"].(string)
	testenv.Eventually(t, 15*time.Second, func() bool {
		_, body := call(t, "GET", base+"/v1/orders/"+id, "", map[string]string{"X-User-Id": "ann"})
		return body["status"] == "PAID"
	}, "ann's order after closesAt PAID")
	if body := poll("ann"); body["status"] != "USED" {
		t.Errorf("ann's ticket after her order = %v, want USED", body)
	}
	if body := poll("ben"); body["status"] != "CLOSED" {
		t.Errorf("ben once ann's slot freed = %v, want CLOSED still: nobody is admitted after closesAt", body)
	}
}
