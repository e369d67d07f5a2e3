package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"golang.org/x/sync/errgroup"

	"usher/gateway/httpapi"
	"usher/internal/testenv"
)

// get sends a request and returns its status.
func get(t *testing.T, method, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(`{}`))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	res.Body.Close()
	return res.StatusCode
}

// serveOn serves app on a loopback port until the test ends.
func serveOn(t *testing.T, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go httpapi.Listen(app, ln)
	t.Cleanup(func() { app.Shutdown() })
	return "http://" + ln.Addr().String()
}

// With its own listener the admin API and the dashboard answer there only;
// the public listener answers 404 for them, as for any path it does not
// serve, and the admin listener serves nothing public.
func TestAdminAPIOnItsOwnListener(t *testing.T) {
	h := newHarness(t)
	h.gw.adminApart = true
	public := serveOn(t, h.gw.app())
	admin := serveOn(t, h.gw.admin)
	q := h.queue
	tests := []struct {
		name          string
		method, path  string
		token         string
		public, admin int
	}{
		{"list queues", "GET", "/v1/admin/queues", "secret-admin", 404, 200},
		{"read a queue", "GET", "/v1/admin/queues/" + q, "secret-admin", 404, 200},
		{"change a queue", "PUT", "/v1/admin/queues/" + q, "secret-admin", 404, 200},
		{"set stock", "PUT", "/v1/admin/stock/sku-1", "secret-admin", 404, 400},
		{"the ops snapshot", "GET", "/v1/admin/ops", "secret-admin", 404, 200},
		{"no token: still 401 on the admin listener", "GET", "/v1/admin/queues", "", 404, 401},
		{"a wrong token", "GET", "/v1/admin/queues", "nope", 404, 401},
		{"the dashboard", "GET", "/ops", "", 404, 200},
		{"the dashboard's script", "GET", "/ops/static/ops.js", "", 404, 200},
		{"a join is public only", "POST", "/v1/queues/" + q + "/tickets", "", 400, 404},
		{"the JWKS is public only", "GET", "/.well-known/jwks.json", "", 200, 404},
		{"health on both", "GET", "/healthz", "", 200, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := get(t, tt.method, public+tt.path, tt.token); got != tt.public {
				t.Errorf("public %s %s = %d, want %d", tt.method, tt.path, got, tt.public)
			}
			if got := get(t, tt.method, admin+tt.path, tt.token); got != tt.admin {
				t.Errorf("admin %s %s = %d, want %d", tt.method, tt.path, got, tt.admin)
			}
		})
	}
}

// Without USHER_ADMIN_ADDR nothing moves: the public listener serves the
// admin API and the dashboard, and there is no second app.
func TestAdminAPIOnThePublicListenerByDefault(t *testing.T) {
	h := newHarness(t)
	base := h.serve()
	if got := get(t, "GET", base+"/v1/admin/queues", "secret-admin"); got != 200 {
		t.Errorf("GET /v1/admin/queues = %d, want 200", got)
	}
	if got := get(t, "GET", base+"/ops", ""); got != 200 {
		t.Errorf("GET /ops = %d, want 200", got)
	}
	if h.gw.admin != nil {
		t.Error("an admin app exists without USHER_ADMIN_ADDR")
	}
}

// run with USHER_ADMIN_ADDR serves the admin API there only, and stops
// both listeners when its context ends.
func TestRunServesTheAdminAPIOnItsListener(t *testing.T) {
	ports := make([]int, 2)
	for i := range ports {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	public, admin := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	env := map[string]string{
		"USHER_GATEWAY_ADDR": public, "USHER_ADMIN_ADDR": admin,
		"USHER_NATS_URL": testenv.NATS(t), "USHER_REDIS_URL": testenv.RedisURL(t),
		"USHER_DATA_DIR": t.TempDir(), "USHER_ADMIN_TOKEN": "run-admin-token",
	}
	var logs testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, &logs) }()
	testenv.Eventually(t, 30*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("run ended at start: %v\n%s", err, logs.String())
		default:
		}
		res, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == 200
	}, "the admin listener is not ready:\n%s", logs.String())
	if got := get(t, "GET", "http://"+admin+"/v1/admin/queues", "run-admin-token"); got != 200 {
		t.Errorf("admin listener: GET /v1/admin/queues = %d, want 200", got)
	}
	if got := get(t, "GET", "http://"+public+"/v1/admin/queues", "run-admin-token"); got != 404 {
		t.Errorf("public listener: GET /v1/admin/queues = %d, want 404", got)
	}
	if !strings.Contains(logs.String(), `"gateway admin API listening"`) {
		t.Errorf("no line says where the admin API listens:\n%s", logs.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run still serving 15 s after its context ended")
	}
}

// slowStart is a listener fiber takes a while to start serving on (it
// asks for the address first): the stop comes before the server holds it.
type slowStart struct{ net.Listener }

func (s slowStart) Addr() net.Addr {
	time.Sleep(100 * time.Millisecond)
	return s.Listener.Addr()
}

// A stop that comes before the server has started serving still ends it,
// and is no error (make run's Ctrl-C right after start left a gateway
// serving forever).
func TestServeAppStopsEvenBeforeItServes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // over before it began
	var g errgroup.Group
	httpapi.Serve(ctx, &g, fiber.New(fiber.Config{DisableStartupMessage: true}), slowStart{ln}, time.Second)
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serving = %v, want nil: the stop is no failure", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still serving 5 s after a stop that came first")
	}
}
