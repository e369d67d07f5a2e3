package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"usher/api"
	"usher/api/contract"
	"usher/internal/pow"
	"usher/internal/testenv"
	"usher/tools/internal/chromium"
)

// The browser example a shop copies (examples/js), on the client module
// (@usher/client, clients/js/src), in headless Chromium against the real
// services: it joins a queue that asks for a proof of work (solving the
// 428's challenge in a Web Worker running the gateway's pow.js), waits on
// the notifier's stream through EventSource — or, with the notifier down,
// polls — and orders with its entry token once READY. The page is served
// as a shop would serve it: its own files, the client's at /usher-client/,
// and /v1 and /q/static passed to the gateway on the same origin.
func TestExampleJSClient(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)

	// The shop's origin, known before the notifier starts (its CORS).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	shop := "http://" + ln.Addr().String()

	env := stackEnv(t, "USHER_NOTIFIER_CORS_ORIGINS", shop, "PGSIM_LATENCY_MEAN_MS", "5")
	gw, adm, nt, ow := env["USHER_GATEWAY_ADDR"], env["USHER_ADMITTER_ADDR"], env["USHER_NOTIFIER_ADDR"], env["USHER_ORDERWORKER_ADDR"]
	env["USHER_NOTIFIER_PUBLIC_URL"] = "http://" + nt
	procs := map[string]*service{}
	for _, name := range []string{"pgsim", "gateway", "admitter", "notifier", "orderworker"} {
		procs[name] = start(t, name, env)
	}
	base := "http://" + gw
	waitReady(t, 60*time.Second, base, "http://"+adm, "http://"+nt, "http://"+ow)

	gateway, _ := url.Parse(base)
	proxy := httputil.NewSingleHostReverseProxy(gateway)
	proxy.FlushInterval = -1
	files := http.FileServer(http.Dir("../../examples/js"))
	module := http.StripPrefix("/usher-client", http.FileServer(http.Dir(clientDir+"/src")))
	doc, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/usher-client/"):
			module.ServeHTTP(w, r)
			return
		case !strings.HasPrefix(r.URL.Path, "/v1/") && !strings.HasPrefix(r.URL.Path, "/q/static/"):
			files.ServeHTTP(w, r)
			return
		}
		// The gateway's answer, and the client's request, checked against
		// the API contract on the way.
		reqBody, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r.Clone(r.Context()))
		res := rec.Result()
		res.Request = r
		if err := doc.Check(contract.Gateway, r, reqBody, res, rec.Body.Bytes()); err != nil {
			t.Errorf("API contract: %v", err)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	admin := map[string]string{"Authorization": "Bearer e2e-admin"}
	if code, body := call(t, "PUT", base+"/v1/admin/stock/js-sku", `{"available": 10}`, admin); code >= 300 {
		t.Fatalf("stock = %d %v", code, body)
	}
	q := testenv.Name(t)
	cfg := `{"targetActive": 1, "tickMs": 50, "sku": "js-sku", "challenge": {"mode": "enforce", "difficulty": 8}}`
	if code, body := call(t, "PUT", base+"/v1/admin/queues/"+q, cfg, admin); code != 201 {
		t.Fatalf("create queue = %d %v", code, body)
	}

	// run has a shopper wait in the example page behind a holder of the
	// queue's one slot, who then leaves; it returns the page's log of
	// states (each "STATUS [position] via join|stream|poll").
	run := func(t *testing.T, user string) []string {
		holder := joinWithProof(t, base, q, user+"-ahead")
		testenv.Eventually(t, 30*time.Second, func() bool {
			_, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+holder, "", nil)
			return body["status"] == "READY"
		}, "the shopper ahead READY")

		ctx := chromium.Start(t, bin)
		if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s/index.html?queue=%s&sku=js-sku&user=%s", shop, q, user))); err != nil {
			t.Fatal(err)
		}
		text := func(sel string) string {
			s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
			if err != nil {
				t.Fatalf("text of %s: %v", sel, err)
			}
			return s
		}
		var status string
		testenv.Eventually(t, 60*time.Second, func() bool {
			status = text("#status")
			return status == "WAITING"
		}, "status %q, want WAITING behind the shopper ahead", status)

		if code, _ := call(t, "DELETE", base+"/v1/queues/"+q+"/tickets/"+holder, "", nil); code != 204 {
			t.Fatalf("leave = %d", code)
		}
		testenv.Eventually(t, 60*time.Second, func() bool {
			status = text("#status")
			return status == "READY"
		}, "status %q, want READY once the shopper ahead left", status)
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#order"))); err != nil {
			t.Fatal(err)
		}
		var result string
		testenv.Eventually(t, 60*time.Second, func() bool {
			result = text("#result")
			return strings.HasSuffix(result, ": PAID")
		}, "order result %q, want PAID", result)
		log, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#log li')].map((li) => li.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		if len(log) == 0 || log[0] != "WAITING 1 via join" {
			t.Errorf("log %q, want it to start with the join's WAITING 1", log)
		}
		return log
	}

	t.Run("stream", func(t *testing.T) {
		log := run(t, "js-stream")
		if last := log[len(log)-1]; last != "READY via stream" {
			t.Errorf("log %q, want READY from the notifier's stream", log)
		}
	})
	t.Run("polling when the notifier is down", func(t *testing.T) {
		procs["notifier"].kill(t)
		log := run(t, "js-poll")
		if last := log[len(log)-1]; last != "READY via poll" {
			t.Errorf("log %q, want READY from a poll", log)
		}
	})
	// Each page joined without a proof, was refused 428, solved the
	// carried challenge and joined with it (the shoppers ahead joined
	// with theirs at once).
	series := `usher_pow_checks_total{mode="enforce",queue="` + q + `",result="%s"}`
	if missing, ok := metricValue(t, base+"/metrics", fmt.Sprintf(series, "missing")), metricValue(t, base+"/metrics", fmt.Sprintf(series, "ok")); missing != "2" || ok != "4" {
		t.Errorf("proof checks: %s missing, %s ok; want 2 (the pages' first tries) and 4", missing, ok)
	}
}

// joinWithProof joins q as user, solving the queue's challenge with the
// Go solver, and returns the ticket.
func joinWithProof(t *testing.T, base, q, user string) string {
	t.Helper()
	_, ch := call(t, "GET", base+"/v1/queues/"+q+"/challenge", "", nil)
	challenge, _ := ch["challenge"].(string)
	difficulty, _ := ch["difficulty"].(float64)
	nonce, err := pow.Solve(context.Background(), challenge, int(difficulty))
	if err != nil {
		t.Fatal(err)
	}
	code, body := call(t, "POST", base+"/v1/queues/"+q+"/tickets", "", map[string]string{"X-User-Id": user, pow.Header: pow.Value(challenge, nonce)})
	if code != 202 {
		t.Fatalf("join %s = %d %v", user, code, body)
	}
	return body["ticket"].(string)
}

// The gateway binary serves the API contract at /openapi.json: the
// document in the repository (api/openapi.yaml, as JSON), valid OpenAPI
// 3.1. The notifier serves none (the gateway's copy covers its paths).
func TestOpenAPIServedByTheRunningGateway(t *testing.T) {
	t.Parallel()
	gw, nt := addr(t), addr(t)
	env := map[string]string{
		"USHER_NATS_URL":      testenv.NATS(t),
		"USHER_REDIS_URL":     ownRedis(t),
		"USHER_DATA_DIR":      t.TempDir(),
		"USHER_GATEWAY_ADDR":  gw,
		"USHER_NOTIFIER_ADDR": nt,
	}
	start(t, "gateway", env)
	start(t, "notifier", env)
	waitReady(t, 60*time.Second, "http://"+gw, "http://"+nt)

	res, err := http.Get("http://" + gw + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json = %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if !bytes.Equal(body, api.JSON()) {
		t.Error("GET /openapi.json is not api/openapi.yaml as JSON")
	}
	d, err := contract.New(body)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ValidateDocument(); err != nil {
		t.Errorf("the served document is not valid OpenAPI 3.1: %v", err)
	}
	if got := d.Routes(contract.Notifier); !slices.Contains(got, "GET /v1/queues/{queue}/tickets/{ticket}/events") {
		t.Errorf("the served document's notifier routes = %v, want its stream", got)
	}
	if code, _ := call(t, "GET", "http://"+nt+"/openapi.json", "", nil); code != 404 {
		t.Errorf("notifier GET /openapi.json = %d, want 404 (the gateway serves the document)", code)
	}
}
