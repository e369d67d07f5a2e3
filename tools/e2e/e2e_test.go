// Package e2e runs usher's services as `make run` does — built binaries,
// configured by environment, on real NATS, Redis and PostgreSQL — and
// drives them over HTTP like a shopper's client, and in headless Chromium
// (chromedp) as shoppers and operators do: the waiting-room page, the ops
// dashboard, the proof of work and the example browser client.
//
// Every test runs beside the others (t.Parallel): each stack has a NATS
// server, a redis-server and a PostgreSQL database of its own, and its
// services listen on ports of their own, so no test sees another's
// queues, keys, orders or broker. Most of a test's time is waiting (for a
// tick, a token's expiry, a browser), not computing.
package e2e

import (
	"bufio"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"usher/internal/testenv"
)

var bins string // folder of the built services

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "usher-e2e-")
	if err != nil {
		panic(err)
	}
	bins = dir
	// -trimpath as scripts/test.sh and the chaos suite build them: make
	// test has compiled these packages so already, and the build here only
	// links (without it, every package compiled a second time: 70–110 s).
	build := exec.Command("go", "build", "-trimpath", "-o", dir+"/", "usher/gateway", "usher/admitter", "usher/notifier", "usher/orderworker", "usher/tools/pgsim", "usher/usherctl")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build:", err)
		os.Exit(1)
	}
	code := m.Run()
	testenv.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// service is one running binary.
type service struct {
	name string
	cmd  *exec.Cmd
	out  *strings.Builder
	mu   *sync.Mutex
	done chan error
}

func start(t testing.TB, name string, env map[string]string) *service {
	t.Helper()
	cmd := exec.Command(filepath.Join(bins, name))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	s := &service{name: name, cmd: cmd, out: &strings.Builder{}, mu: &sync.Mutex{}, done: make(chan error, 1)}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.mu.Lock()
			s.out.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
		}
	}()
	go func() { s.done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			s.mu.Lock()
			t.Logf("%s output:\n%s", name, s.out.String())
			s.mu.Unlock()
		}
	})
	return s
}

// output is what the service has written so far (stdout and stderr).
func (s *service) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// interrupt sends Ctrl-C and reports how the process ended.
func (s *service) interrupt(t *testing.T) error {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-s.done:
		return err
	case <-time.After(15 * time.Second):
		return fmt.Errorf("%s still running 15s after SIGINT", s.name)
	}
}

// ownRedis starts a redis-server for this test alone and returns its URL.
// A stack keeps keys no queue's name sets apart — the payment breaker, the
// stock ledger, the order records' mark, the ACL users — which tests
// running side by side must not share.
func ownRedis(t testing.TB) string {
	t.Helper()
	url, _ := testenv.RedisServer(t)
	return url
}

func addr(t testing.TB) string {
	t.Helper()
	p, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// stackEnv is the environment of a whole stack on this test's servers:
// pgsim and the four services on addresses of their own (read them back as
// env["USHER_GATEWAY_ADDR"] and so on), the admin token e2e-admin, and
// extra as name, value pairs on top.
func stackEnv(t testing.TB, extra ...string) map[string]string {
	t.Helper()
	// Five ports, each free a moment ago and none twice: a port closed by
	// FreePort can come back from the next call, and two services given
	// the same one fail with "bind: address already in use".
	used := map[string]bool{}
	distinct := func() string {
		for {
			if a := addr(t); !used[a] {
				used[a] = true
				return a
			}
		}
	}
	pg := distinct()
	env := map[string]string{
		"USHER_NATS_URL":         testenv.NATS(t),
		"USHER_REDIS_URL":        ownRedis(t),
		"USHER_DATABASE_URL":     testenv.PostgresURL(t),
		"USHER_DATA_DIR":         t.TempDir(),
		"USHER_GATEWAY_ADDR":     distinct(),
		"USHER_ADMITTER_ADDR":    distinct(),
		"USHER_NOTIFIER_ADDR":    distinct(),
		"USHER_ORDERWORKER_ADDR": distinct(),
		"USHER_PAYMENT_URL":      "http://" + pg,
		"PGSIM_ADDR":             pg,
		"USHER_ADMIN_TOKEN":      "e2e-admin",
		// The tests run side by side with the other packages' on a shared
		// CPU, where the admitter's follower can take longer than the
		// half second a join waits for its admission at once; the tests
		// that want READY in a join's own answer would then get WAITING.
		"USHER_JOIN_READY_WAIT": "5s",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

// waitReady waits until every service answers its /readyz.
func waitReady(t testing.TB, within time.Duration, bases ...string) {
	t.Helper()
	for _, u := range bases {
		testenv.Eventually(t, within, func() error {
			res, err := http.Get(u + "/readyz")
			if err != nil {
				return err
			}
			res.Body.Close()
			if res.StatusCode != 200 {
				return fmt.Errorf("readyz %d", res.StatusCode)
			}
			return nil
		}, "%s not ready", u)
	}
}

// oneSlotQueue stocks 5 units of e2e-sku and creates a queue selling it,
// with one slot and a 20 ms tick, through the admin API; it returns the
// queue's name.
func oneSlotQueue(t testing.TB, base string) string {
	t.Helper()
	admin := map[string]string{"Authorization": "Bearer e2e-admin"}
	if code, body := call(t, "PUT", base+"/v1/admin/stock/e2e-sku", `{"available": 5}`, admin); code >= 300 {
		t.Fatalf("stock = %d %v", code, body)
	}
	q := testenv.Name(t)
	if code, body := call(t, "PUT", base+"/v1/admin/queues/"+q, `{"targetActive": 1, "tickMs": 20, "sku": "e2e-sku"}`, admin); code != 201 {
		t.Fatalf("create queue = %d %v", code, body)
	}
	return q
}

// joinLine puts user in q's line and returns their ticket.
func joinLine(t testing.TB, base, q, user string) string {
	t.Helper()
	code, body := call(t, "POST", base+"/v1/queues/"+q+"/tickets", "", map[string]string{"X-User-Id": user})
	if code != 202 {
		t.Fatalf("join %s = %d %v", user, code, body)
	}
	return body["ticket"].(string)
}

// orderPaid orders one unit of e2e-sku as user with their entry token and
// waits until the order is PAID.
func orderPaid(t testing.TB, base, user, token string) {
	t.Helper()
	code, order := call(t, "POST", base+"/v1/orders", `{"sku": "e2e-sku", "quantity": 1}`,
		map[string]string{"X-User-Id": user, "Authorization": "Bearer " + token})
	if code != 202 {
		t.Fatalf("order = %d %v", code, order)
	}
	id, _ := order["orderId"].(string)
	testenv.Eventually(t, 15*time.Second, func() bool {
		_, body := call(t, "GET", base+"/v1/orders/"+id, "", map[string]string{"X-User-Id": user})
		return body["status"] == "PAID"
	}, user+"'s order PAID")
}

func call(t testing.TB, method, url, body string, header map[string]string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

func TestJoinToReadyOverHTTP(t *testing.T) {
	t.Parallel()
	gw, adm, nt := addr(t), addr(t), addr(t)
	env := map[string]string{
		"USHER_NATS_URL":      testenv.NATS(t),
		"USHER_REDIS_URL":     ownRedis(t),
		"USHER_DATA_DIR":      t.TempDir(),
		"USHER_GATEWAY_ADDR":  gw,
		"USHER_ADMITTER_ADDR": adm,
		"USHER_NOTIFIER_ADDR": nt,
		"USHER_ADMIN_TOKEN":   "e2e-admin",
	}
	gateway := start(t, "gateway", env)
	admitter := start(t, "admitter", env)
	notifier := start(t, "notifier", env)
	base := "http://" + gw
	waitReady(t, 15*time.Second, base, "http://"+adm, "http://"+nt)
	admin := map[string]string{"Authorization": "Bearer e2e-admin"}
	q := testenv.Name(t)
	if code, body := call(t, "PUT", base+"/v1/admin/queues/"+q, `{"targetActive": 10, "maxAdmitPerTick": 4, "tickMs": 20}`, admin); code != 201 {
		t.Fatalf("create queue = %d %v", code, body)
	}

	const shoppers = 30
	tickets := make([]string, shoppers)
	for i := range tickets {
		code, body := call(t, "POST", base+"/v1/queues/"+q+"/tickets", "", map[string]string{"X-User-Id": fmt.Sprintf("shopper-%02d", i)})
		if code != 202 {
			t.Fatalf("join %d = %d %v", i, code, body)
		}
		tickets[i], _ = body["ticket"].(string)
	}
	// Ten slots: the first ten become READY, in join order, and nobody else.
	testenv.Eventually(t, 15*time.Second, func() bool {
		for _, tk := range tickets[:10] {
			if _, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tk, "", nil); body["status"] != "READY" {
				return false
			}
		}
		return true
	}, "the first ten shoppers READY")
	for i, tk := range tickets[10:] {
		_, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tk, "", nil)
		if body["status"] != "WAITING" || body["position"] != float64(i+1) {
			t.Fatalf("shopper %d = %v, want WAITING at %d", i+10, body, i+1)
		}
	}
	// Entry tokens verify offline against the published JWKS.
	_, jwks := call(t, "GET", base+"/.well-known/jwks.json", "", nil)
	_, ready := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tickets[0], "", nil)
	verifyEdDSA(t, jwks, ready["token"].(string))

	// Leaving frees the slot: the next shopper in line is admitted.
	if code, _ := call(t, "DELETE", base+"/v1/queues/"+q+"/tickets/"+tickets[0], "", nil); code != 204 {
		t.Fatalf("leave = %d", code)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tickets[10], "", nil)
		return body["status"] == "READY"
	}, "shopper 10 admitted after shopper 0 left")

	// Ctrl-C stops every service cleanly.
	for _, s := range []*service{gateway, admitter, notifier} {
		if err := s.interrupt(t); err != nil {
			t.Errorf("%s after SIGINT: %v", s.name, err)
		}
	}
}

func verifyEdDSA(t *testing.T, jwks map[string]any, tok string) {
	t.Helper()
	keys, _ := jwks["keys"].([]any)
	if len(keys) == 0 {
		t.Fatalf("JWKS = %v", jwks)
	}
	k := keys[0].(map[string]any)
	pub, err := base64.RawURLEncoding.DecodeString(k["x"].(string))
	if err != nil || k["crv"] != "Ed25519" {
		t.Fatalf("JWKS key = %v", k)
	}
	parts := strings.Split(tok, ".")
	sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
	if len(parts) != 3 || !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
		t.Fatal("entry token does not verify against the JWKS")
	}
	var hdr struct{ Kid, Alg string }
	b, _ := base64.RawURLEncoding.DecodeString(parts[0])
	_ = json.Unmarshal(b, &hdr)
	if hdr.Kid != k["kid"] || hdr.Alg != "EdDSA" {
		t.Fatalf("token header = %+v, want kid %v alg EdDSA", hdr, k["kid"])
	}
}

// The whole journey through every service: join, READY, order, PAID, and
// the slot freed for the next shopper.
func TestJourneyFromJoinToPaidOrder(t *testing.T) {
	t.Parallel()
	env := stackEnv(t, "PGSIM_LATENCY_MEAN_MS", "5")
	gw, adm, nt, ow := env["USHER_GATEWAY_ADDR"], env["USHER_ADMITTER_ADDR"], env["USHER_NOTIFIER_ADDR"], env["USHER_ORDERWORKER_ADDR"]
	for _, name := range []string{"pgsim", "gateway", "admitter", "notifier", "orderworker"} {
		start(t, name, env)
	}
	base := "http://" + gw
	waitReady(t, 20*time.Second, base, "http://"+adm, "http://"+nt, "http://"+ow)
	q := oneSlotQueue(t, base)
	tickets := [2]string{joinLine(t, base, q, "ann"), joinLine(t, base, q, "ben")}
	var token string
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tickets[0], "", nil)
		token, _ = body["token"].(string)
		return body["status"] == "READY"
	}, "ann READY")
	// One slot: ben waits while ann's order is open.
	if _, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tickets[1], "", nil); body["status"] != "WAITING" {
		t.Fatalf("ben = %v, want WAITING while ann holds the slot", body)
	}
	orderPaid(t, base, "ann", token)
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tickets[1], "", nil)
		return body["status"] == "READY"
	}, "ben admitted once ann's order finished")
	if _, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tickets[0], "", nil); body["status"] != "USED" {
		t.Fatalf("ann's ticket = %v, want USED", body)
	}
}
