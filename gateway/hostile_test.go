package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"usher/gateway/httpapi"
	"usher/gateway/userauth"
	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/redisacl"
	"usher/internal/testenv"
	"usher/internal/ticket"
	"usher/internal/token"
	"usher/internal/waitqueue"
	"usher/internal/waitqueue/roles"
)

// Nothing under /v1/admin answers without the admin token: every route
// registered there, by whoever adds it, is walked.
func TestEveryAdminRouteNeedsTheToken(t *testing.T) {
	h := newHarness(t)
	seen := 0
	for _, rt := range h.app.GetRoutes(true) {
		if !strings.HasPrefix(rt.Path, "/v1/admin") {
			continue
		}
		seen++
		var path []string
		for _, seg := range strings.Split(rt.Path, "/") {
			if strings.HasPrefix(seg, ":") || strings.HasPrefix(seg, "*") {
				seg = h.queue
			}
			path = append(path, seg)
		}
		p := strings.Join(path, "/")
		for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer nope", "Basic c2VjcmV0LWFkbWlu", "bearer secret-admi", "Bearer secret-admi", "Bearer secret-admin-and-more"} {
			hdr := map[string]string{}
			if auth != "" {
				hdr["Authorization"] = auth
			}
			r := h.do(rt.Method, p, `{}`, hdr)
			if r.status != 401 || (rt.Method != "HEAD" && !isProblem(r)) {
				t.Errorf("%s %s with Authorization %q = %d %s, want a 401 problem", rt.Method, p, auth, r.status, r.raw)
			}
		}
	}
	if seen < 4 {
		t.Fatalf("walked %d admin routes, want every one (at least the 4 known)", seen)
	}
}

// The gateway, run as main runs it at debug level and connected to Redis
// as production runs it (its own ACL user, the password in a file, the
// default user off), logs no ticket, token or secret — Redis passwords
// included — over joins, polls, READY, orders, admin calls and errors; and
// Redis refused none of its work.
func TestLogsCarryNoSecrets(t *testing.T) {
	dir := t.TempDir()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	userSecret := "user-jwt-secret-" + strings.Repeat("u", 32)
	if err := os.WriteFile(filepath.Join(dir, "user.secret"), []byte(userSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	adminToken := "admin-token-" + strings.Repeat("a", 24)
	natsURL := testenv.NATS(t)
	redisDir := filepath.Join(dir, "redis-users")
	if _, err := redisacl.Write(redisDir); err != nil {
		t.Fatal(err)
	}
	redisURL, _ := testenv.RedisServerWith(t, "--aclfile", filepath.Join(redisDir, redisacl.AuthFile))
	env := map[string]string{
		"USHER_GATEWAY_ADDR":         fmt.Sprintf("127.0.0.1:%d", port),
		"USHER_NATS_URL":             natsURL,
		"USHER_REDIS_URL":            redisURL,
		"USHER_REDIS_USER":           redisacl.UserOf(redisacl.Gateway),
		"USHER_REDIS_PASSWORD_FILE":  redisacl.PasswordFile(redisDir, redisacl.UserOf(redisacl.Gateway)),
		"USHER_DATA_DIR":             dir,
		"USHER_ADMIN_TOKEN":          adminToken,
		"USHER_LOG_LEVEL":            "debug",
		"USHER_USER_AUTH":            "jwt-hs256",
		"USHER_USER_JWT_SECRET_FILE": filepath.Join(dir, "user.secret"),
	}
	var logs testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, &logs) }()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testenv.Eventually(t, 30*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("run ended before it was ready: %v", err)
		default:
		}
		res, err := http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == 200
	}, "gateway not ready")

	call := func(method, path, body string, hdr map[string]string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}
	q := testenv.Name(t)
	admin := map[string]string{"Authorization": "Bearer " + adminToken}
	if code, body := call("PUT", "/v1/admin/queues/"+q, `{"targetActive": 2, "sku": "sku-1"}`, admin); code != 201 {
		t.Fatalf("PUT queue = %d %v", code, body)
	}
	userTok := userJWT(t, jwt.SigningMethodHS256, []byte(userSecret), "", jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	user := map[string]string{userauth.HeaderUserToken: userTok}
	_, joined := call("POST", "/v1/queues/"+q+"/tickets", "", user)
	tk, _ := joined["ticket"].(string)
	if tk == "" {
		t.Fatalf("join = %v", joined)
	}
	adminRedis, err := waitqueue.Connect(ctx, waitqueue.Settings{URL: redisURL, Pool: 2, User: redisacl.Admin,
		Password: waitqueue.PasswordFile(redisacl.PasswordFile(redisDir, redisacl.Admin))})
	if err != nil {
		t.Fatal(err)
	}
	defer adminRedis.Close()
	line := roles.New(adminRedis)
	nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{natsURL}, Replicas: 1}, "hostile-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	epoch, err := bus.StreamID(ctx, js, event.StreamEntries)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Applied(t, line, q, epoch, 1<<40)
	testenv.Tick(t, line, q, waitqueue.Tick{Epoch: epoch, TargetActive: 2, TickLength: 10 * time.Millisecond, TokenTTL: time.Minute})
	time.Sleep(10 * time.Millisecond)
	_, ready := call("GET", "/v1/queues/"+q+"/tickets/"+tk, "", nil)
	entry, _ := ready["token"].(string)
	if entry == "" {
		t.Fatalf("poll after admission = %v, want READY with a token", ready)
	}
	orderHdr := map[string]string{userauth.HeaderUserToken: userTok, "Authorization": "Bearer " + entry, "Content-Type": "application/json"}
	call("POST", "/v1/orders", `{"sku": "sku-1"}`, orderHdr)
	call("POST", "/v1/orders", `{"sku": "sku-2"}`, orderHdr)
	call("GET", "/v1/queues/"+q+"/tickets/"+tk[:len(tk)-2]+"xx", "", nil)
	call("GET", "/v1/admin/queues", "", map[string]string{"Authorization": "Bearer " + adminToken + "x"})
	call("POST", "/v1/queues/"+q+"/tickets", "", map[string]string{userauth.HeaderUserToken: userTok + "x"})
	call("DELETE", "/v1/queues/"+q+"/tickets/"+tk, "", nil)
	call("GET", "/nothing/"+tk, "", nil)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run = %v", err)
	}

	out := logs.String()
	if !strings.Contains(out, `"client error"`) {
		t.Fatalf("the log has no client errors; the test saw nothing:\n%s", out)
	}
	secrets := map[string]string{"admin token": adminToken, "user JWT secret": userSecret, "user JWT": userTok,
		"ticket": tk, "entry token": entry, "user JWT signature": userTok[strings.LastIndexByte(userTok, '.')+1:],
		"ticket MAC": tk[strings.LastIndexByte(tk, '.')+1:]}
	for _, u := range redisacl.Users() {
		b, err := os.ReadFile(redisacl.PasswordFile(redisDir, u.Name))
		if err != nil {
			t.Fatal(err)
		}
		secrets["Redis password of "+u.Name] = strings.TrimSpace(string(b))
	}
	if denied, err := adminRedis.Do(context.Background(), "ACL", "LOG").Slice(); err != nil || len(denied) > 0 {
		t.Errorf("Redis ACL LOG = %v, %v; want nothing the gateway's user was refused", denied, err)
	}
	for _, f := range []string{"ticket.secret", "signing.key"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		secrets[f] = strings.TrimSpace(string(b))
	}
	for name, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the log contains the %s", name)
		}
	}
}

// A request that fails inside is logged by the one error writer with its
// route template, never its path (which holds the ticket).
func TestFailedRequestsLogNoTicket(t *testing.T) {
	h := newHarness(t)
	tk := h.join("alice").str("ticket")
	var logs testenv.Buffer
	h.gw.log = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	broken := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	broken.Close()
	h.gw.line = waitqueue.NewClient(broken)
	h.rebuild()
	if r := h.poll(tk); r.status != 503 || !isProblem(r) {
		t.Fatalf("poll with Redis gone = %d %s, want a 503 problem", r.status, r.raw)
	}
	out := logs.String()
	if !strings.Contains(out, "request failed") || !strings.Contains(out, "/v1/queues/:queue/tickets/:ticket") {
		t.Fatalf("log = %s, want the failure with its route template", out)
	}
	if strings.Contains(out, tk) || strings.Contains(out, tk[strings.LastIndexByte(tk, '.')+1:]) {
		t.Errorf("log = %s, holds the ticket", out)
	}
}

// Entry tokens at the order endpoint, each forgery with its exact status
// (the table in orders_test.go has garbage, another key, expired, another
// user's, before nbf and an unknown queue; these are the rest).
func TestForgedEntryTokensAtTheOrderEndpoint(t *testing.T) {
	h := newOrderHarness(t)
	now := time.Now()
	h.putQueue(h.queue+"-b", `{"targetActive": 5, "sku": "sku-b"}`, 201)
	valid := h.ready("alice")[0]
	jti := h.tokenID(valid)
	parts := strings.Split(valid, ".")
	enc := base64.RawURLEncoding.EncodeToString
	header := func(h map[string]string) string { b, _ := json.Marshal(h); return enc(b) }
	kid := func() string {
		var hdr map[string]any
		b, _ := base64.RawURLEncoding.DecodeString(parts[0])
		json.Unmarshal(b, &hdr)
		return hdr["kid"].(string)
	}()
	// alg confusion: HS256 keyed with the public key's bytes, under the
	// real kid.
	pub := []byte(h.gw.keys.JWKS())
	var set struct{ Keys []struct{ X string } }
	json.Unmarshal(pub, &set)
	x, _ := base64.RawURLEncoding.DecodeString(set.Keys[0].X)
	confused := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": token.Issuer, "sub": "alice", "aud": h.queue, "jti": jti,
		"nbf": now.Add(-time.Second).Unix(), "exp": now.Add(time.Minute).Unix()})
	confused.Header["kid"] = kid
	confusedTok, _ := confused.SignedString(x)
	otherQueue, _ := h.gw.keys.Sign(token.Claims{ID: waitqueue.TokenID(h.queue+"-b", h.gw.epoch(), 1), Queue: h.queue + "-b", User: "alice", ReadyAt: now.Add(-time.Second), ExpiresAt: now.Add(time.Minute)})
	_, wrongPriv, _ := ed25519.GenerateKey(nil)
	wrongKey := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"iss": token.Issuer, "sub": "alice", "aud": h.queue, "jti": jti,
		"nbf": now.Add(-time.Second).Unix(), "exp": now.Add(time.Minute).Unix()})
	wrongKey.Header["kid"] = kid
	wrongKeyTok, _ := wrongKey.SignedString(wrongPriv)

	tests := []struct {
		name string
		tok  string
		want int
	}{
		{"alg none", header(map[string]string{"alg": "none", "typ": "JWT"}) + "." + parts[1] + ".", 401},
		{"alg none under the real kid", header(map[string]string{"alg": "none", "kid": kid}) + "." + parts[1] + ".", 401},
		{"HS256 keyed with the public key", confusedTok, 401},
		{"signed by a wrong key under the real kid", wrongKeyTok, 401},
		{"a kid usher never had", header(map[string]string{"alg": "EdDSA", "kid": "nope"}) + "." + parts[1] + "." + parts[2], 401},
		{"the signature cut short", valid[:len(valid)-4], 401},
		{"two tokens glued", valid + "." + valid, 401},
		{"another queue's token for this queue's SKU", otherQueue, 422},
		{"valid", valid, 202},
		{"valid, submitted again: answered from its order", valid, 202},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.order("alice", tt.tok, `{"sku": "sku-1"}`)
			if r.status != tt.want || (tt.want >= 400 && !isProblem(r)) {
				t.Fatalf("POST /v1/orders = %d %s, want %d", r.status, r.raw, tt.want)
			}
		})
	}
}

// A client that sends half a request and stalls is cut off after the read
// timeout instead of holding a connection for ever.
func TestSlowClientsAreCutOff(t *testing.T) {
	h := newHarness(t)
	h.gw.http = httpapi.Limits{Read: 300 * time.Millisecond}
	h.rebuild()
	base := h.serve()
	conn := dialRaw(t, base) // its 30 s deadline a safety net only: the server must close long before it
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: usher\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	_, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the gateway kept a stalled request's connection open")
	}
}

// Headers beyond the limit are a 431 problem, not a crash or a hang.
func TestOversizedHeadersAre431(t *testing.T) {
	h := newHarness(t)
	base := h.serve()
	req, _ := http.NewRequest("GET", base+"/v1/queues/"+h.queue+"/tickets/x", nil)
	req.Header.Set("X-Junk", strings.Repeat("j", 16<<10))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	wantProblemResponse(t, "oversized headers", res, 431)
}

// A client still sending its oversized request when the 431 is written
// (a browser with too many cookies) can finish sending and then read the
// answer: the gateway does not reset the connection under it.
func TestA431ReachesAClientStillSending(t *testing.T) {
	h := newHarness(t)
	base := h.serve()
	conn := dialRaw(t, base)
	head := "GET /v1/queues/" + h.queue + "/tickets/x HTTP/1.1\r\nHost: usher\r\nX-Junk: " + strings.Repeat("j", 12<<10)
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	// The gateway has read its 8 KiB of headers and answered by now;
	// closing a socket with input unread would have reset it.
	time.Sleep(200 * time.Millisecond)
	if _, err := io.WriteString(conn, strings.Repeat("j", 4<<10)+"\r\n\r\n"); err != nil {
		t.Fatalf("sending the rest of the request: %v (the gateway reset the connection)", err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	wantProblemResponse(t, "oversized headers", res, 431)
}

// A request the gateway cannot parse is answered 400 at once with a
// problem whose detail is fixed: never the request's bytes, which carry
// credentials (the parser's own message quotes them).
func TestAnUnparsableRequestIs400WithoutEchoingIt(t *testing.T) {
	h := newHarness(t)
	base := h.serve()
	for _, raw := range []string{
		"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer SECRET\r\nBad Header\r\nX-After: y\r\n\r\n",
		"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer SECRET\r\nContent-Length: nope\r\n\r\n",
		"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer SECRET\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"GET\r\nAuthorization: Bearer SECRET\r\n\r\n",
	} {
		conn := dialRaw(t, base)
		conn.SetDeadline(time.Now().Add(5 * time.Second)) // well before the read timeout's 408
		if _, err := io.WriteString(conn, raw); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var p struct{ Type, Detail string }
		_ = json.Unmarshal(body, &p)
		if res.StatusCode != 400 || res.Header.Get("Content-Type") != "application/problem+json" ||
			p.Type != "https://usher.dev/problems/bad-request" || p.Detail != "the request could not be parsed" {
			t.Errorf("%q = %d %s %s; want 400, a bad-request problem that the request could not be parsed", raw, res.StatusCode, res.Header.Get("Content-Type"), body)
		}
		if strings.Contains(string(body), "SECRET") {
			t.Errorf("%q: the answer echoes the request: %s", raw, body)
		}
	}
}

// A head whose last header line has no colon is one fasthttp (v1.51)
// cannot tell from a head still arriving — its header scanner waits for
// a colon — so it is answered at the read timeout: a 408 problem that
// echoes nothing, not a hang.
func TestAHeaderLineWithoutAColonAtTheEndIs408(t *testing.T) {
	h := newHarness(t)
	h.gw.http = httpapi.Limits{Read: 300 * time.Millisecond}
	h.rebuild()
	base := h.serve()
	conn := dialRaw(t, base) // its deadline a safety net only
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header SECRET\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 408 || res.Header.Get("Content-Type") != "application/problem+json" || strings.Contains(string(body), "SECRET") {
		t.Fatalf("a head ending in a line without a colon = %d %s %s; want a 408 problem that echoes nothing", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
}

// Under a burst of malformed, oversized, forged and bot requests the
// gateway stays healthy, answers none of them with a 5xx, and every valid
// shopper keeps their place.
func TestHostileBurstLosesNobody(t *testing.T) {
	h := newHarness(t)
	h.gw.ips = mustClientIPs(t, []string{"127.0.0.0/8"}, "X-Forwarded-For")
	h.rebuild()
	h.putQueue(h.queue, `{"targetActive": 5, "rateLimit": {"perIpPerSecond": 50, "perIpBurst": 100, "perUserPerSecond": 5, "perUserBurst": 10}}`, 200)
	base := h.serve()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 20 * time.Second}
	send := func(method, path, body string, hdr map[string]string) (int, error) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		io.Copy(io.Discard, res.Body)
		if res.StatusCode >= 400 && res.Header.Get("Content-Type") != "application/problem+json" && method != "HEAD" {
			return res.StatusCode, fmt.Errorf("%s %.60s = %d as %q", method, path, res.StatusCode, res.Header.Get("Content-Type"))
		}
		return res.StatusCode, nil
	}

	const shoppers = 20
	type shopper struct {
		ticket string
		pos    int64
	}
	valid := make([]shopper, shoppers)
	for i := range valid {
		r := h.do("POST", "/v1/queues/"+h.queue+"/tickets", "", map[string]string{"X-User-Id": fmt.Sprint("shopper-", i), "X-Forwarded-For": fmt.Sprintf("198.51.100.%d", i+1)})
		if r.status != 202 {
			t.Fatalf("join %d = %d %s", i, r.status, r.raw)
		}
		valid[i] = shopper{r.str("ticket"), r.num("position")}
	}

	q := "/v1/queues/" + h.queue
	forged := h.gw.tickets.Issue(ticket.Ticket{Queue: h.queue, User: "shopper-0", Seq: 1})
	forged = forged[:len(forged)-4] + "AAAA"
	otherSigner, _ := ticket.NewSigner([]byte(strings.Repeat("z", 32)))
	foreign := otherSigner.Issue(ticket.Ticket{Queue: h.queue, User: "shopper-1", Seq: 2})
	big := strings.Repeat("x", 64<<10)
	attacks := []func(i int) (int, error){
		func(int) (int, error) { return send("GET", q+"/tickets/garbage", "", nil) },
		func(int) (int, error) { return send("GET", q+"/tickets/"+forged, "", nil) },
		func(int) (int, error) { return send("DELETE", q+"/tickets/"+forged, "", nil) },
		func(int) (int, error) { return send("DELETE", q+"/tickets/"+foreign, "", nil) },
		func(int) (int, error) { return send("GET", q+"/tickets/"+strings.Repeat("t1.", 200), "", nil) },
		func(int) (int, error) {
			return send("POST", q+"/tickets", "", map[string]string{"X-User-Id": "<script>"})
		},
		func(int) (int, error) {
			return send("POST", q+"/tickets", "", map[string]string{"X-User-Id": strings.Repeat("a", 65)})
		},
		func(int) (int, error) {
			return send("POST", "/v1/queues/..%2f..%2fadmin/tickets", "", map[string]string{"X-User-Id": "u"})
		},
		func(int) (int, error) { return send("POST", q+"/tickets", big, map[string]string{"X-User-Id": "u"}) },
		func(int) (int, error) { return send("PUT", "/v1/admin/queues/"+h.queue, `{"state":"closed"}`, nil) },
		func(int) (int, error) {
			return send("PUT", "/v1/admin/queues/"+h.queue, `{"state":"closed"}`, map[string]string{"Authorization": "Bearer secret-admim"})
		},
		func(int) (int, error) {
			return send("POST", "/v1/orders", `{"sku":`, map[string]string{"X-User-Id": "u", "Authorization": "Bearer a.b.c"})
		},
		func(int) (int, error) {
			return send("POST", "/v1/orders", big, map[string]string{"X-User-Id": "u", "Authorization": "Bearer a.b.c"})
		},
		func(int) (int, error) {
			return send("GET", q+"/tickets/x", "", map[string]string{"X-Junk": big[:12<<10]})
		},
		func(i int) (int, error) { // a bot joining as ever new users from one address
			return send("POST", q+"/tickets", "", map[string]string{"X-User-Id": fmt.Sprint("bot-", i), "X-Forwarded-For": "203.0.113.66"})
		},
		func(i int) (int, error) { // one user refreshing join
			return send("POST", q+"/tickets", "", map[string]string{"X-User-Id": "refresher", "X-Forwarded-For": fmt.Sprintf("203.0.113.%d", i%200)})
		},
	}
	const total = 3200
	var next, limited atomic.Int64
	var statusMu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	errs := make(chan error, total)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > total {
					return
				}
				code, err := attacks[i%len(attacks)](i)
				statusMu.Lock()
				statuses[code]++
				statusMu.Unlock()
				switch {
				case err != nil && !isBrokenByServer(err):
					errs <- err
				case code >= 500:
					errs <- fmt.Errorf("attack %d answered %d", i%len(attacks), code)
				case code == 429:
					limited.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("answers to %d hostile requests by status (0: connection closed by the gateway): %v", total, statuses)
	if limited.Load() == 0 {
		t.Error("no bot request was rate limited")
	}
	for i, s := range valid {
		r := h.poll(s.ticket)
		if r.status != 200 || r.str("status") != "WAITING" || r.num("position") != s.pos {
			t.Errorf("shopper %d after the burst = %d %s, want WAITING at %d", i, r.status, r.raw, s.pos)
		}
	}
	if cfg, _ := h.gw.queues.Get(h.queue); cfg.State != catalog.StateOpen {
		t.Errorf("queue state = %s after unauthenticated PUTs, want open", cfg.State)
	}
	if code, err := send("GET", "/readyz", "", nil); code != 200 || err != nil {
		t.Errorf("/readyz = %d, %v; want 200", code, err)
	}
}

// isBrokenByServer: the gateway may close a connection on a client that
// sent more than it accepts, before the client finished writing.
func isBrokenByServer(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe") || strings.Contains(s, "EOF")
}

// No Authorization header opens an admin endpoint but the token itself,
// and none makes the order endpoint fail inside.
func FuzzAuthorization(f *testing.F) {
	h := newOrderHarness(f)
	f.Add("Bearer secret-admin")
	f.Add("Bearer eyJhbGciOiJub25lIn0.e30.")
	f.Add("bearer  secret-admin")
	f.Add("Basic YWRtaW46YWRtaW4=")
	f.Add("BEARER secret-admin")
	f.Add("Bearer\tsecret-admin")
	f.Fuzz(func(t *testing.T, auth string) {
		if !validHeaderValue(auth) {
			return
		}
		h := h.with(t)
		r := h.do("GET", "/v1/admin/queues/"+h.queue, "", map[string]string{"Authorization": auth})
		// HTTP trims the value; the scheme is any case, then spaces (RFC 9110 §11.1).
		words := strings.FieldsFunc(strings.Trim(auth, " \t"), func(r rune) bool { return r == ' ' })
		opens := len(words) == 2 && strings.EqualFold(words[0], "Bearer") && words[1] == "secret-admin"
		if (r.status == 200) != opens || (r.status != 200 && (r.status != 401 || !isProblem(r))) {
			t.Fatalf("admin with Authorization %q = %d %s", auth, r.status, r.raw)
		}
		o := h.do("POST", "/v1/orders", `{"sku":"sku-1"}`, map[string]string{"X-User-Id": "alice", "Authorization": auth})
		if o.status < 400 || o.status >= 500 || !isProblem(o) {
			t.Fatalf("order with Authorization %q = %d %s, want a 4xx problem", auth, o.status, o.raw)
		}
	})
}

// The Authorization scheme is matched in any case (RFC 9110 §11.1), at the
// admin API and at the order endpoint alike; another scheme is a 401.
func TestTheBearerSchemeIsMatchedInAnyCase(t *testing.T) {
	h := newOrderHarness(t)
	tok := h.ready("alice")[0]
	for _, scheme := range []string{"Bearer ", "bearer ", "BEARER ", "bEaReR ", "Bearer   "} {
		if r := h.do("GET", "/v1/admin/queues/"+h.queue, "", map[string]string{"Authorization": scheme + "secret-admin"}); r.status != 200 {
			t.Errorf("admin with Authorization %q = %d %s, want 200", scheme+"secret-admin", r.status, r.raw)
		}
		o := h.do("POST", "/v1/orders", `{"sku": "sku-1", "quantity": 1}`,
			map[string]string{"X-User-Id": "alice", "Authorization": scheme + tok, "Content-Type": "application/json"})
		if o.status != 202 {
			t.Errorf("order with the scheme %q = %d %s, want 202", scheme, o.status, o.raw)
		}
	}
	for _, auth := range []string{"Basic secret-admin", "Bearersecret-admin", "Bearer", "Bearer\tsecret-admin"} {
		if r := h.do("GET", "/v1/admin/queues/"+h.queue, "", map[string]string{"Authorization": auth}); r.status != 401 || !isProblem(r) {
			t.Errorf("admin with Authorization %q = %d %s, want a 401 problem", auth, r.status, r.raw)
		}
		o := h.do("POST", "/v1/orders", `{"sku": "sku-1", "quantity": 1}`,
			map[string]string{"X-User-Id": "alice", "Authorization": strings.Replace(auth, "secret-admin", tok, 1), "Content-Type": "application/json"})
		if o.status != 401 || !isProblem(o) {
			t.Errorf("order with Authorization %q = %d %s, want a 401 problem", auth, o.status, o.raw)
		}
	}
}

// A method the router does not know at all (not one of the standard ones)
// is answered like any other method a path does not take: 405 with Allow
// where the path is a resource, else 404 — problems both, not fiber's
// plain-text 400.
func TestAnUnknownMethodIs405WithAllowOr404(t *testing.T) {
	h := newHarness(t)
	for _, tt := range []struct{ method, path, allow string }{
		{"FOO", "/healthz", "GET, HEAD"},
		{"PROPFIND", "/v1/queues/" + h.queue, "GET, HEAD"},
		{"get", "/v1/queues/" + h.queue + "/tickets", "POST"}, // methods are case-sensitive
		{"FOO", "/v1/admin/queues/" + h.queue + "/notice", "DELETE, PUT"},
	} {
		r := h.do(tt.method, tt.path, "", nil)
		if r.status != 405 || r.header.Get("Allow") != tt.allow || !isProblem(r) || r.str("type") != "https://usher.dev/problems/method-not-allowed" {
			t.Errorf("%s %s = %d, Allow %q, %s; want 405, Allow %q, a method-not-allowed problem", tt.method, tt.path, r.status, r.header.Get("Allow"), r.raw, tt.allow)
		}
	}
	if r := h.do("FOO", "/v1/nowhere", "", nil); r.status != 404 || !isProblem(r) || r.str("type") != "https://usher.dev/problems/not-found" {
		t.Errorf("FOO /v1/nowhere = %d %s, want 404 not-found", r.status, r.raw)
	}
}

// A path is matched as the document spells it: another case or a
// trailing slash is no resource (404), not another spelling of one.
func TestAPathIsMatchedExactly(t *testing.T) {
	h := newHarness(t)
	q := h.queue
	for _, path := range []string{"/v1/queues/" + q, "/openapi.json", "/healthz", "/q/" + q, "/v1/admin/queues/" + q} {
		if r := h.do("GET", path, "", adminAuth); r.status != 200 {
			t.Errorf("GET %s = %d %s, want 200", path, r.status, r.raw)
		}
	}
	for _, path := range []string{"/V1/QUEUES/" + q, "/v1/Queues/" + q, "/OPENAPI.JSON", "/Healthz", "/Q/" + q, "/V1/ADMIN/QUEUES"} {
		if r := h.do("GET", path, "", adminAuth); r.status != 404 || !isProblem(r) || r.str("type") != "https://usher.dev/problems/not-found" {
			t.Errorf("GET %s = %d %s, want 404 not-found", path, r.status, r.raw)
		}
	}
	// Not through h.do: the contract checker (api/contract) still drops a
	// trailing slash when it looks a path up in the document.
	for _, tt := range []struct{ method, path string }{
		{"GET", "/v1/queues/" + q + "/"}, {"GET", "/openapi.json/"}, {"GET", "/healthz/"}, {"GET", "/q/" + q + "/"},
		{"GET", "/v1/admin/queues/" + q + "/"}, {"POST", "/v1/queues/" + q + "/tickets/"},
	} {
		req := httptest.NewRequest(tt.method, tt.path, nil)
		req.Header.Set("Authorization", adminAuth["Authorization"])
		req.Header.Set("X-User-Id", "alice")
		res, err := h.app.Test(req, 10_000)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var p struct{ Type string }
		_ = json.Unmarshal(body, &p)
		if res.StatusCode != 404 || p.Type != "https://usher.dev/problems/not-found" || res.Header.Get("Allow") != "" {
			t.Errorf("%s %s = %d, Allow %q, %s; want 404 not-found (no 405: the path is no resource)", tt.method, tt.path, res.StatusCode, res.Header.Get("Allow"), body)
		}
	}
}

// A method a path does not take is 405 with Allow naming the ones it does
// (RFC 9110 §15.5.6), whatever the path's parameters; a path that is no
// resource is 404. Both are problem documents (and the contract checks
// them against the document, x-usher-other-methods).
func TestAWrongMethodIs405WithAllow(t *testing.T) {
	h := newHarness(t)
	for _, tt := range []struct{ method, path, allow string }{
		{"PUT", "/v1/queues/" + h.queue + "/tickets", "POST"},
		{"GET", "/v1/queues/" + h.queue + "/tickets", "POST"},
		{"HEAD", "/v1/queues/" + h.queue + "/tickets", "POST"},
		{"POST", "/v1/queues/" + h.queue, "GET, HEAD"},
		{"PATCH", "/v1/queues/any-queue/tickets/t.x", "DELETE, GET, HEAD"},
		{"DELETE", "/v1/orders", "POST"},
		{"POST", "/v1/admin/queues/" + h.queue + "/notice", "DELETE, PUT"},
		{"POST", "/healthz", "GET, HEAD"},
	} {
		r := h.do(tt.method, tt.path, "", map[string]string{"Authorization": "Bearer secret-admin"}) // the admin API asks who first
		if r.status != 405 || r.header.Get("Allow") != tt.allow || (tt.method != "HEAD" && (!isProblem(r) || r.str("type") != "https://usher.dev/problems/method-not-allowed")) {
			t.Errorf("%s %s = %d, Allow %q, %s; want 405, Allow %q, a method-not-allowed problem", tt.method, tt.path, r.status, r.header.Get("Allow"), r.raw, tt.allow)
		}
	}
	for _, path := range []string{"/v1/nowhere", "/v1/queues/" + h.queue + "/tickets/t.x/extra", "/v1/queues//tickets"} {
		if r := h.do("POST", path, "", nil); r.status != 404 || r.str("type") != "https://usher.dev/problems/not-found" {
			t.Errorf("POST %s = %d %s, want 404 not-found", path, r.status, r.raw)
		}
	}
}

// dialRaw opens a connection to the gateway at base for a test to write
// raw HTTP on, closed when the test ends, every read and write bounded by
// 30 s.
func dialRaw(t *testing.T, base string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	return conn
}

// wantProblemResponse fails t unless res, the answer to what, has status
// and is a problem document.
func wantProblemResponse(t *testing.T, what string, res *http.Response, status int) {
	t.Helper()
	if res.StatusCode != status || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s = %d %s, want %d problem+json", what, res.StatusCode, res.Header.Get("Content-Type"), status)
	}
}
