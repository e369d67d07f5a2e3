package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"usher/internal/testenv"
)

// buildApp builds the native app's example (examples/app) beside the
// services and returns its path.
func buildApp(t *testing.T) string {
	t.Helper()
	p := filepath.Join(bins, "app")
	build := exec.Command("go", "build", "-trimpath", "-o", p, "usher/examples/app")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build examples/app: %v", err)
	}
	return p
}

// runApp starts the example app with args and returns its output so far
// and a channel that gets its exit.
func runApp(t *testing.T, app string, args ...string) (*testenv.Buffer, <-chan error) {
	t.Helper()
	out := &testenv.Buffer{}
	cmd := exec.Command(app, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("app output:\n%s", out.String())
		}
	})
	return out, done
}

// exited waits for the app to end and fails the test unless it succeeded.
func exited(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("app: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("app still running after 60 s")
	}
}

// The native app's flow, runnable (examples/app), against the real stack:
// it joins a queue that asks for a proof of work, says its place from the
// notifier's stream, and once READY orders with the entry token — through
// usher's order path to PAID (polling the gateway while the notifier is
// down), or in the app's own checkout call, whose service verifies the
// token offline with the gateway's JWKS.
func TestAppExampleJoinsFollowsAndOrders(t *testing.T) {
	t.Parallel()
	app := buildApp(t)
	base, _, procs := wholeStack(t)
	admin := map[string]string{"Authorization": "Bearer e2e-admin"}
	if code, body := call(t, "PUT", base+"/v1/admin/stock/e2e-sku", `{"available": 5}`, admin); code >= 300 {
		t.Fatalf("stock = %d %v", code, body)
	}
	// orderBehind has the app wait behind the holder of a queue's one slot
	// (asking a proof of work), who then leaves, and order; it returns
	// what the app said.
	orderBehind := func(t *testing.T, user string) string {
		q := testenv.Name(t)
		cfg := `{"targetActive": 1, "tickMs": 20, "sku": "e2e-sku", "challenge": {"mode": "enforce", "difficulty": 8}}`
		if code, body := call(t, "PUT", base+"/v1/admin/queues/"+q, cfg, admin); code != 201 {
			t.Fatalf("create queue = %d %v", code, body)
		}
		ahead := joinWithProof(t, base, q, user+"-ahead")
		out, done := runApp(t, app, "-gateway", base, "-queue", q, "-user", user, "-sku", "e2e-sku")
		testenv.Eventually(t, 30*time.Second, func() bool {
			return strings.Contains(out.String(), "WAITING: place 1 of ")
		}, "the app saying its place: %q", out)
		if code, _ := call(t, "DELETE", base+"/v1/queues/"+q+"/tickets/"+ahead, "", nil); code != 204 {
			t.Fatalf("leave = %d", code)
		}
		exited(t, done)
		for _, want := range []string{"proof of work: 8 bits", "READY: entry token valid until", ": PAID\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("app output lacks %q:\n%s", want, out)
			}
		}
		return out.String()
	}

	t.Run("usher's order path", func(t *testing.T) {
		if out := orderBehind(t, "app-shopper"); strings.Contains(out, "stream down") {
			t.Errorf("the app lost its stream with the notifier up:\n%s", out)
		}
	})

	t.Run("the app's own checkout", func(t *testing.T) {
		q := testenv.Name(t)
		if code, body := call(t, "PUT", base+"/v1/admin/queues/"+q, `{"targetActive": 1, "tickMs": 20}`, admin); code != 201 {
			t.Fatalf("create queue = %d %v", code, body)
		}
		var mu sync.Mutex
		var got string
		shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]string{"status": "confirmed"})
		}))
		t.Cleanup(shop.Close)
		out, done := runApp(t, app, "-gateway", base, "-queue", q, "-user", "app-own", "-checkout", shop.URL+"/api/checkout")
		exited(t, done)
		if !strings.Contains(out.String(), `checkout: 200 {"status":"confirmed"}`) {
			t.Errorf("app output lacks the checkout's answer:\n%s", out)
		}
		_, jwks := call(t, "GET", base+"/.well-known/jwks.json", "", nil)
		mu.Lock()
		defer mu.Unlock()
		verifyEdDSA(t, jwks, got)
	})

	t.Run("polls with the notifier down", func(t *testing.T) {
		procs["notifier"].kill(t)
		if out := orderBehind(t, "app-poller"); !strings.Contains(out, "stream down") {
			t.Errorf("the app did not say it polls:\n%s", out)
		}
	})
}
