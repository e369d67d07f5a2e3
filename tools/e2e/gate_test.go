package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"usher/internal/testenv"
	"usher/tools/internal/chromium"
)

// The proxy gate with the proxies shops run: real nginx and Caddy (Debian
// packages) in front of a small origin and the real gateway and admitter,
// each configured with the snippet docs/integration.md shows
// (testdata/gate), driven by Go's HTTP client with a cookie jar as a
// shopper would be: a protected page sends the shopper to the waiting
// room, the pass brings them back and the origin sees who they are; a
// second shopper without a pass is queued, a copied cookie is refused,
// and the slot frees when the checkout completes.

// The addresses the snippets name, which each test replaces with its own.
const (
	snippetProxy   = "127.0.0.1:8000"
	snippetGateway = "127.0.0.1:8080"
	snippetOrigin  = "127.0.0.1:3000"
)

func TestGateBehindNginx(t *testing.T) {
	t.Parallel()
	bin := proxyBinary(t, "nginx")
	gateEndToEnd(t, func(t *testing.T, site, listen string) {
		startNginx(t, bin, site, listen)
	}, "nginx.conf")
}

func TestGateBehindCaddy(t *testing.T) {
	t.Parallel()
	bin := proxyBinary(t, "caddy")
	gateEndToEnd(t, func(t *testing.T, site, listen string) {
		startCaddy(t, bin, site, listen)
	}, "Caddyfile")
}

// The same journey in headless Chromium behind nginx, with the waiting
// room's own page: a protected page sends ann to it, the page joins, and
// on READY hands her the pass and brings her back, where the origin sees
// her; bob, behind her, waits on the page until her checkout completes,
// and is then brought back the same way.
func TestGateInABrowserBehindNginx(t *testing.T) {
	t.Parallel()
	bin := proxyBinary(t, "nginx")
	chrome := chromium.Path(t)
	shop, q, _ := gateShop(t, func(t *testing.T, site, listen string) { startNginx(t, bin, site, listen) }, "nginx.conf")
	ann, bob := browser(t, chrome), browser(t, chrome)
	login := func(ctx context.Context, user string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(shop+"/shop/static/login")); err != nil {
			t.Fatalf("open the shop: %v", err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie = "shop_user=`+user+`; path=/"`)); err != nil {
			t.Fatalf("log in as %s: %v", user, err)
		}
	}
	// shows waits until the tab shows the origin's page for path as user.
	shows := func(ctx context.Context, user, path string) {
		t.Helper()
		want := "user=" + user + " queue=" + q + " path=" + path
		var got string
		testenv.Eventually(t, 30*time.Second, func() bool {
			got, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			return got == want
		}, "%s's tab shows %q, want %q", user, got, want)
	}
	login(ann, "ann")
	if err := chromedp.Do(ann, chromedp.Navigate(shop+"/shop/item")); err != nil {
		t.Fatalf("ann opens a protected page: %v", err)
	}
	shows(ann, "ann", "/shop/item")

	login(bob, "bob")
	if err := chromedp.Do(bob, chromedp.Navigate(shop+"/shop/item")); err != nil {
		t.Fatalf("bob opens a protected page: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		st, _ := chromedp.Run(bob, chromedp.Evaluate[string](`(document.getElementById('usher') || {dataset: {}}).dataset.status || ""`))
		return st == "WAITING"
	}, "bob waiting in the waiting room")

	if err := chromedp.Do(ann, chromedp.Navigate(shop+"/shop/checkout/done")); err != nil {
		t.Fatalf("ann completes her checkout: %v", err)
	}
	shows(ann, "ann", "/shop/checkout/done")
	shows(bob, "bob", "/shop/item")
}

// The snippets the tests run are the ones the integration guide shows,
// character for character.
func TestGateSnippetsAreTheDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/integration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"nginx.conf", "Caddyfile"} {
		b, err := os.ReadFile(filepath.Join("testdata/gate", f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(doc), string(b)) {
			t.Errorf("docs/integration.md does not quote testdata/gate/%s verbatim", f)
		}
	}
}

// proxyBinary is the proxy's path; missing, the test is skipped, unless
// in CI, where it fails (scripts/deps.sh installs both).
func proxyBinary(t *testing.T, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err == nil {
		return bin
	}
	if _, serr := os.Stat("/usr/sbin/" + name); serr == nil {
		return "/usr/sbin/" + name // Debian's nginx, outside a user's PATH
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed (scripts/deps.sh installs it): %v", name, err)
	}
	t.Skipf("%s is not installed (scripts/deps.sh installs it); skipping its gate test", name)
	return ""
}

// gateShop runs the gate's stack (gateStack), a small origin echoing who
// passed, and the proxy that start runs with the snippet file
// (testdata/gate) in front of both; it returns the proxy's base URL and
// the gate's queue.
func gateShop(t *testing.T, start func(t *testing.T, site, listen string), snippet string) (shop, q string, gw *service) {
	t.Helper()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "user=%s queue=%s path=%s", r.Header.Get("Usher-User"), r.Header.Get("Usher-Queue"), r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	base, q, gw := gateStack(t)
	proxyAddr := addr(t)
	raw, err := os.ReadFile(filepath.Join("testdata/gate", snippet))
	if err != nil {
		t.Fatal(err)
	}
	site := strings.NewReplacer(snippetProxy, proxyAddr, snippetGateway, strings.TrimPrefix(base, "http://"),
		snippetOrigin, strings.TrimPrefix(origin.URL, "http://")).Replace(string(raw))
	start(t, site, proxyAddr)
	return "http://" + proxyAddr, q, gw
}

// gateEndToEnd runs the shopper's journey through the proxy that start
// runs with the snippet file (testdata/gate) on listen.
func gateEndToEnd(t *testing.T, start func(t *testing.T, site, listen string), snippet string) {
	shop, q, gw := gateShop(t, start, snippet)
	ann := newShopper(t, shop, "ann")
	// A protected page without a pass: to the waiting room, with the way back.
	res := ann.get(t, "/shop/item", "text/html")
	loc := res.Header.Get("Location")
	if res.StatusCode != 302 || !strings.HasPrefix(loc, "/q/"+q+"?return=") {
		t.Fatalf("ann's first visit = %d Location %q, want 302 to the waiting room", res.StatusCode, loc)
	}
	ret, _ := url.Parse(loc)
	annTicket := ann.joinReady(t, q)
	ann.takePass(t, annTicket, ret.Query().Get("return"), shop+"/shop/item")
	if body := ann.body(t, "/shop/item", "text/html"); body != "user=ann queue="+q+" path=/shop/item" {
		t.Fatalf("the origin saw %q for ann with her pass, want her user and queue", body)
	}

	// A second shopper, without a pass: queued, the API gets 429 problem+json.
	bob := newShopper(t, shop, "bob")
	if res := bob.get(t, "/shop/item", "text/html"); res.StatusCode != 302 {
		t.Errorf("bob's visit = %d, want 302 to the waiting room", res.StatusCode)
	}
	res = bob.get(t, "/shop/api/cart", "application/json")
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("bob's API call = %d %v, want 429 problem+json with Retry-After", res.StatusCode, res.Header)
	}
	bobTicket := bob.join(t, q)
	// ann's cookie copied into bob's shopper is no pass for bob.
	bob.setCookie(t, "usher_pass", ann.cookie(t, "usher_pass"))
	if res := bob.get(t, "/shop/item", "text/html"); res.StatusCode != 302 {
		t.Errorf("bob with ann's copied pass = %d, want 302 to the waiting room", res.StatusCode)
	}

	// ann's checkout completes: the slot frees, and bob's turn comes.
	if body := ann.body(t, "/shop/checkout/done", "text/html"); !strings.HasPrefix(body, "user=ann") {
		t.Fatalf("ann's checkout completion reached the origin as %q", body)
	}
	bob.awaitReady(t, q, bobTicket)
	bob.takePass(t, bobTicket, "/shop/item", shop+"/shop/item")
	if body := bob.body(t, "/shop/item", "text/html"); body != "user=bob queue="+q+" path=/shop/item" {
		t.Errorf("the origin saw %q for bob with his pass", body)
	}
	if res := ann.get(t, "/shop/item", "text/html"); res.StatusCode != 302 {
		t.Errorf("ann after her completion = %d, want 302: her pass ended with her slot", res.StatusCode)
	}

	// usher down: the proxy's own setting (the snippet's, closed) answers
	// 503 problem+json with Retry-After, a page and an API call alike.
	_ = gw.cmd.Process.Kill()
	<-gw.done
	for _, accept := range []string{"text/html", "application/json"} {
		res := bob.get(t, "/shop/item", accept)
		if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("with usher down, Accept %s = %d %v, want 503 problem+json with Retry-After", accept, res.StatusCode, res.Header)
		}
	}
}

// gateStack runs a gateway whose gate protects /shop/ for a one-slot
// queue, and an admitter; it returns the gateway's base URL and the queue.
func gateStack(t *testing.T) (base, q string, gw *service) {
	t.Helper()
	q = testenv.Name(t)
	dir := t.TempDir()
	rules := fmt.Sprintf(`{"rules": [{"queue": %q, "paths": ["/shop/"], "completePath": "/shop/checkout/done",
		"bypass": {"paths": ["/shop/static/"]}}], "insecureCookie": true}`, q)
	if err := os.WriteFile(filepath.Join(dir, "gate.json"), []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	gwAddr, adm := addr(t), addr(t)
	env := map[string]string{
		"USHER_NATS_URL":      testenv.NATS(t),
		"USHER_REDIS_URL":     ownRedis(t),
		"USHER_DATA_DIR":      dir,
		"USHER_GATEWAY_ADDR":  gwAddr,
		"USHER_ADMITTER_ADDR": adm,
		"USHER_ADMIN_TOKEN":   "e2e-admin",
		"USHER_GATE_FILE":     filepath.Join(dir, "gate.json"),
	}
	gw = start(t, "gateway", env)
	start(t, "admitter", env)
	base = "http://" + gwAddr
	waitReady(t, 30*time.Second, base, "http://"+adm)
	if code, body := call(t, "PUT", base+"/v1/admin/queues/"+q, `{"targetActive": 1, "tickMs": 20, "tokenTtlSeconds": 600}`,
		map[string]string{"Authorization": "Bearer e2e-admin"}); code != 201 {
		t.Fatalf("create queue = %d %v", code, body)
	}
	return base, q, gw
}

// shopper is a shopper's HTTP client with a cookie jar, logged in to the
// shop as user (the shop_user cookie the snippets name the user by), that
// follows no redirect by itself.
type shopper struct {
	c    *http.Client
	base string
}

func newShopper(t *testing.T, base, user string) *shopper {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	b := &shopper{base: base, c: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	b.setCookie(t, "shop_user", user)
	return b
}

func (b *shopper) setCookie(t *testing.T, name, value string) {
	t.Helper()
	u, _ := url.Parse(b.base)
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: name, Value: value, Path: "/"}})
}

func (b *shopper) cookie(t *testing.T, name string) string {
	t.Helper()
	u, _ := url.Parse(b.base)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == name {
			return c.Value
		}
	}
	t.Fatalf("no %s cookie", name)
	return ""
}

func (b *shopper) do(t *testing.T, method, path, accept, form string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, b.base+path, strings.NewReader(form))
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := b.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	res.Body.Close()
	return res
}

func (b *shopper) get(t *testing.T, path, accept string) *http.Response {
	t.Helper()
	return b.do(t, "GET", path, accept, "")
}

// body is what a GET of path answers, which must be a 200.
func (b *shopper) body(t *testing.T, path, accept string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", b.base+path, nil)
	req.Header.Set("Accept", accept)
	res, err := b.c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("GET %s = %d %s (Location %q), want 200", path, res.StatusCode, raw, res.Header.Get("Location"))
	}
	return string(raw)
}

// join joins q through the proxy, as the waiting-room page does, and
// returns the ticket.
func (b *shopper) join(t *testing.T, q string) string {
	t.Helper()
	code, body := b.json(t, "POST", "/v1/queues/"+q+"/tickets")
	if code != 202 {
		t.Fatalf("join = %d %v", code, body)
	}
	return body["ticket"].(string)
}

// joinReady joins q and waits until the ticket is READY.
func (b *shopper) joinReady(t *testing.T, q string) string {
	t.Helper()
	tkt := b.join(t, q)
	b.awaitReady(t, q, tkt)
	return tkt
}

func (b *shopper) awaitReady(t *testing.T, q, tkt string) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, func() error {
		if _, body := b.json(t, "GET", "/v1/queues/"+q+"/tickets/"+tkt); body["status"] != "READY" {
			return fmt.Errorf("status %v", body["status"])
		}
		return nil
	}, "READY")
}

func (b *shopper) json(t *testing.T, method, path string) (int, map[string]any) {
	t.Helper()
	return call(t, method, b.base+path, "", map[string]string{"Cookie": "shop_user=" + b.cookie(t, "shop_user")})
}

// takePass posts the READY ticket to the pass as the waiting-room page
// does and checks it is sent back to want with a pass cookie.
func (b *shopper) takePass(t *testing.T, tkt, ret, want string) {
	t.Helper()
	res := b.do(t, "POST", "/v1/gate/pass", "text/html", url.Values{"ticket": {tkt}, "return": {ret}}.Encode())
	if res.StatusCode != 303 || (res.Header.Get("Location") != want && b.base+res.Header.Get("Location") != want) {
		t.Fatalf("pass = %d Location %q, want 303 to %s", res.StatusCode, res.Header.Get("Location"), want)
	}
	if b.cookie(t, "usher_pass") == "" {
		t.Fatal("the pass set no cookie")
	}
}

// startNginx runs nginx as a child process with site (a server block,
// listening on listen) in a config of its own under a temporary folder.
func startNginx(t *testing.T, bin, site, listen string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "site.conf"), []byte(site), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`error_log %[1]s/error.log info;
pid %[1]s/nginx.pid;
events {}
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/site.conf;
}
`, dir)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	runProxy(t, dir, exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", "stderr",
		"-g", "daemon off; master_process off;"), listen, "error.log", "access.log")
}

// startCaddy runs caddy as a child process with the Caddyfile site,
// listening on listen.
func startCaddy(t *testing.T, bin, site, listen string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(site), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", file, "--adapter", "caddyfile")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
	runProxy(t, dir, cmd, listen)
}

// runProxy starts cmd, waits until listen accepts, and stops it when the
// test ends, showing its output (and logs, files under dir) if it failed.
func runProxy(t *testing.T, dir string, cmd *exec.Cmd, listen string, logs ...string) {
	t.Helper()
	var out testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(cmd.Path), out.String())
			for _, l := range logs {
				b, _ := os.ReadFile(filepath.Join(dir, l))
				t.Logf("%s:\n%s", l, b)
			}
		}
	})
	testenv.Eventually(t, 15*time.Second, func() error {
		select {
		case <-done:
			return fmt.Errorf("%s exited: %s", filepath.Base(cmd.Path), out.String())
		default:
		}
		res, err := http.Get("http://" + listen + "/shop/static/probe")
		if err != nil {
			return err
		}
		res.Body.Close()
		return nil
	}, "%s listening on %s", filepath.Base(cmd.Path), listen)
}
