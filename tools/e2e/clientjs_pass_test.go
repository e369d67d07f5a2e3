package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"usher/internal/testenv"
	"usher/tools/internal/chromium"
)

// In a browser, the client hands a READY shopper to the proxy gate's pass:
// it posts the ticket and the return URL as a form to /v1/gate/pass — the
// ticket in no URL, the shopper's identity headers with it (a page's own
// form could not send the shop's user JWT) — keeps the cookie the answer
// sets, and goes to the return URL; a refusal leaves the page where it is
// and says why. The pass endpoint here stands in for the gateway's,
// answering as the gate does (a cookie and 303 to the return URL, 409
// not-ready): what is checked is what the client sends and does.
func TestTheJSClientEntersTheGatesPass(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)
	var mu sync.Mutex
	var got []string
	mux := http.NewServeMux()
	mux.Handle("GET /usher-client/", http.StripPrefix("/usher-client", http.FileServer(http.Dir(clientDir+"/src"))))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><body><script type="module">
import { createClient } from '/usher-client/usher.js';
const usher = createClient({headers: {'X-User-Token': 'jwt-of-alice'}});
const refused = await usher.enter({ticket: 'not-ready'}, '/shop/drop').then(() => 'entered', (e) => e.status + ' ' + e.type);
await fetch('/refused', {method: 'POST', body: refused});
await usher.enter({ticket: 't2.ZGVtbw.YWxpY2U.x.1.sig'}, '/shop/drop?size=42');
</script></body>`)
	})
	mux.HandleFunc("POST /refused", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, "refused "+string(b))
		mu.Unlock()
	})
	mux.HandleFunc("POST /v1/gate/pass", func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("ticket") == "not-ready" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"type":"https://usher.dev/problems/not-ready","title":"Conflict","status":409}`)
			return
		}
		mu.Lock()
		got = append(got, r.URL.RawQuery, r.Header.Get("X-User-Token"), r.PostFormValue("ticket"), r.PostFormValue("return"))
		mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: "usher_pass", Value: "sealed", Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
		http.Redirect(w, r, r.PostFormValue("return"), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /shop/drop", func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Cookie("usher_pass")
		mu.Lock()
		if c != nil {
			got = append(got, "cookie "+c.Value)
		}
		mu.Unlock()
		fmt.Fprint(w, `<!doctype html><title>shop</title><p>in</p>`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	ctx := chromium.Start(t, bin)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	var where string
	testenv.Eventually(t, 30*time.Second, func() bool {
		where, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname + location.search`))
		return where == "/shop/drop?size=42"
	}, "the browser at %q, want at the shop's /shop/drop?size=42", where)
	mu.Lock()
	defer mu.Unlock()
	want := []string{"refused 409 not-ready", "", "jwt-of-alice", "t2.ZGVtbw.YWxpY2U.x.1.sig", "/shop/drop?size=42", "cookie sealed"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q, want %q (the refusal as the page caught it; the pass's query, user token, ticket and return; the cookie at the shop)", got, want)
	}
}
