package e2e

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"usher/internal/testenv"
)

// A READY shopper who leaves — the gateway's DELETE answers 204 — is told
// so at once on every event stream they hold (the same shopper in two
// tabs): closed, reason left, within a second or so, not at their token's
// expiry. On make run's broker, each service holding only its own
// permissions: the notifier hears the gateway's leave and is refused
// nothing.
func TestALeaveEndsTheShoppersStreamsAtOnce(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	natsURL, brokerLog := leastPrivilegeBroker(t, data)
	gw, adm, nt := addr(t), addr(t), addr(t)
	env := map[string]string{
		"USHER_NATS_URL":      natsURL,
		"USHER_REDIS_URL":     ownRedis(t),
		"USHER_DATA_DIR":      data,
		"USHER_GATEWAY_ADDR":  gw,
		"USHER_ADMITTER_ADDR": adm,
		"USHER_NOTIFIER_ADDR": nt,
		"USHER_ADMIN_TOKEN":   "e2e-admin",
	}
	for _, name := range []string{"gateway", "notifier", "admitter"} {
		start(t, name, env)
	}
	base := "http://" + gw
	waitReady(t, 30*time.Second, base, "http://"+adm, "http://"+nt)
	q := testenv.Name(t)
	admin := map[string]string{"Authorization": "Bearer e2e-admin"}
	if code, body := call(t, "PUT", base+"/v1/admin/queues/"+q, `{"targetActive": 1, "tickMs": 20, "tokenTtlSeconds": 600}`, admin); code != 201 {
		t.Fatalf("create queue = %d %v", code, body)
	}
	code, body := call(t, "POST", base+"/v1/queues/"+q+"/tickets", "", map[string]string{"X-User-Id": "ann"})
	if code != 202 {
		t.Fatalf("join = %d %v", code, body)
	}
	tk := body["ticket"].(string)
	events := "http://" + nt + "/v1/queues/" + q + "/tickets/" + tk + "/events"
	tabs := []*tab{openTab(t, events), openTab(t, events)}
	for _, tb := range tabs {
		tb.await(t, "ready", 15*time.Second)
	}
	if code, body := call(t, "DELETE", base+"/v1/queues/"+q+"/tickets/"+tk, "", nil); code != 204 {
		t.Fatalf("leave = %d %v", code, body)
	}
	for i, tb := range tabs {
		if d := tb.await(t, "closed", 2*time.Second); d != `{"reason":"left"}` {
			t.Errorf("tab %d: closed %s, want {\"reason\":\"left\"}", i, d)
		}
	}
	if v := brokerLog.Violations(); len(v) > 0 {
		t.Fatalf("the broker refused the services what they need:\n%s", strings.Join(v, "\n"))
	}
}

// tab is one open event stream, as a browser tab holds it, read line by
// line in the background.
type tab struct{ lines chan string }

func openTab(t *testing.T, url string) *tab {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	if res.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET %s = %s", url, res.Status)
	}
	tb := &tab{lines: make(chan string, 256)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(tb.lines)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			select {
			case tb.lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); res.Body.Close(); <-done })
	return tb
}

// await returns the data of the next event named name, skipping others,
// failing the test if none comes within.
func (tb *tab) await(t *testing.T, name string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	found := false
	for {
		select {
		case line, ok := <-tb.lines:
			if !ok {
				t.Fatalf("stream ended before %s", name)
			}
			switch {
			case line == "event: "+name:
				found = true
			case found && strings.HasPrefix(line, "data: "):
				return strings.TrimPrefix(line, "data: ")
			case line == "":
				found = false
			}
		case <-deadline:
			t.Fatalf("no %s event within %v", name, within)
		}
	}
}
