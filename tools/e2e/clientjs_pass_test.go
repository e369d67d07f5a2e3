package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"usher/internal/testenv"
	"usher/tools/internal/chromium"
)

// In a browser, the client hands a READY shopper to the proxy gate's pass
// as the waiting-room page does: a form POST of the ticket and the return
// URL to /v1/gate/pass — the ticket in no URL — and follows the redirect
// back to the shop. The pass endpoint here stands in for the gateway's,
// answering as the gate does (303 to the return URL): what is checked is
// what the client sends.
func TestTheJSClientEntersTheGatesPassWithAForm(t *testing.T) {
	bin := chromium.Path(t)
	var mu sync.Mutex
	var got []string
	mux := http.NewServeMux()
	mux.Handle("GET /usher-client/", http.StripPrefix("/usher-client", http.FileServer(http.Dir(clientDir+"/src"))))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><body><script type="module">
import { createClient } from '/usher-client/usher.js';
createClient({headers: {'X-User-Id': 'alice'}}).enter({ticket: 't2.ZGVtbw.YWxpY2U.x.1.sig'}, '/shop/drop?size=42');
</script></body>`)
	})
	mux.HandleFunc("POST /v1/gate/pass", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.RawQuery, r.PostFormValue("ticket"), r.PostFormValue("return"))
		mu.Unlock()
		http.Redirect(w, r, r.PostFormValue("return"), http.StatusSeeOther)
	})
	mux.HandleFunc("GET /shop/drop", func(w http.ResponseWriter, r *http.Request) {
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
	}, "the browser at %q, want back at the shop's /shop/drop?size=42", where)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"", "t2.ZGVtbw.YWxpY2U.x.1.sig", "/shop/drop?size=42"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the pass got query, ticket, return = %q, want %q", got, want)
	}
}
