package e2e

import (
	"strings"
	"testing"
	"time"

	"usher/shared/testenv"
)

// A queue closed by hand (state closed in the admin PUT) ends the line,
// not the turn of a shopper already READY — as closesAt does (README,
// "Scheduled drops"): those in line are told CLOSED (closed), new joins
// are 410 queue-closed, and the READY shopper keeps their token and may
// order until it expires — the gateway takes the order, the order worker
// pays it. README's row for state closed said nothing of them.
func TestAShopperReadyWhenAQueueIsClosedByHandOrdersAfterIt(t *testing.T) {
	env := stackEnv(t, "PGSIM_LATENCY_MEAN_MS", "5")
	gw, adm, ow := env["USHER_GATEWAY_ADDR"], env["USHER_ADMITTER_ADDR"], env["USHER_ORDERWORKER_ADDR"]
	for _, name := range []string{"pgsim", "gateway", "admitter", "orderworker"} {
		start(t, name, env)
	}
	base := "http://" + gw
	waitReady(t, 20*time.Second, base, "http://"+adm, "http://"+ow)
	admin := map[string]string{"Authorization": "Bearer e2e-admin"}
	const sku = "e2e-closed-by-hand-sku"
	if code, body := call(t, "PUT", base+"/v1/admin/stock/"+sku, `{"available": 5}`, admin); code >= 300 {
		t.Fatalf("stock = %d %v", code, body)
	}
	q := testenv.Name(t)
	putState := func(state string, want int) {
		t.Helper()
		cfg := `{"targetActive": 1, "tickMs": 20, "tokenTtlSeconds": 300, "sku": "` + sku + `", "state": "` + state + `"}`
		if code, body := call(t, "PUT", base+"/v1/admin/queues/"+q, cfg, admin); code != want {
			t.Fatalf("PUT queue %s = %d %v, want %d", state, code, body, want)
		}
	}
	putState("open", 201)
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

	putState("closed", 200)
	testenv.Eventually(t, 10*time.Second, func() bool {
		body := poll("ben")
		return body["status"] == "CLOSED" && body["reason"] == "closed"
	}, "ben CLOSED (closed) once the queue is closed")
	code, body := call(t, "POST", base+"/v1/queues/"+q+"/tickets", "", map[string]string{"X-User-Id": "cat"})
	if typ, _ := body["type"].(string); code != 410 || !strings.HasSuffix(typ, "/queue-closed") {
		t.Errorf("a join into the closed queue = %d %v, want 410 queue-closed", code, body)
	}

	// Ann, READY before the closing, is READY still with the same token,
	// and her order is taken and paid.
	if body := poll("ann"); body["status"] != "READY" || body["token"] != token {
		t.Fatalf("ann after the closing = %v, want READY with the token she was given", body)
	}
	code, order := call(t, "POST", base+"/v1/orders", `{"sku": "`+sku+`", "quantity": 1}`,
		map[string]string{"X-User-Id": "ann", "Authorization": "Bearer " + token})
	if code != 202 {
		t.Fatalf("ann's order after the closing = %d %v, want 202", code, order)
	}
	id, _ := order["orderId"].(string)
	testenv.Eventually(t, 15*time.Second, func() bool {
		_, body := call(t, "GET", base+"/v1/orders/"+id, "", map[string]string{"X-User-Id": "ann"})
		return body["status"] == "PAID"
	}, "ann's order after the closing PAID")
	if body := poll("ann"); body["status"] != "USED" {
		t.Errorf("ann's ticket after her order = %v, want USED", body)
	}
	if body := poll("ben"); body["status"] != "CLOSED" {
		t.Errorf("ben once ann's slot freed = %v, want CLOSED still: a closed queue admits nobody", body)
	}
}
