package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"usher/internal/testenv"
	"usher/tools/internal/chromium"
)

// A shopper the admitter gave up on (gone past abandonAfterSeconds) hears
// it from the example client the same way whoever says it: a poll answers
// LEFT with reason abandoned, the notifier's stream closed {"reason":
// "left", "abandoned": true} (a laptop waking: the browser's EventSource
// reconnects before any poll). The client once read the stream's as
// reason left, a shopper who chose to leave. The gateway and notifier here
// are the API document's answers, served by the test: what is checked is
// how the client module (clients/js/src), on the browser's EventSource,
// reads them.
func TestTheJSClientTellsAnAbandonedShopperAsAPollDoes(t *testing.T) {
	t.Parallel()
	bin := chromium.Path(t)
	mux := http.NewServeMux()
	mux.Handle("GET /usher-client/", http.StripPrefix("/usher-client", http.FileServer(http.Dir(clientDir+"/src"))))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><script type="module">
import { createClient } from '/usher-client/usher.js';
window.result = '';
createClient({headers: {'X-User-Id': 'alice'}}).wait('drop').then(
  (s) => { window.result = 'resolved ' + s.status; },
  (e) => { window.result = e.status + ' ' + (e.reason || ''); });
</script>`)
	})
	mux.HandleFunc("POST /v1/queues/drop/tickets", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{"status":"WAITING","ticket":"tk1","position":3,"waiting":3,"etaSeconds":30,"pollAfterMs":60000,"events":"/events"}`)
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: closed\ndata: {\"reason\":\"left\",\"abandoned\":true}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	ctx := chromium.Start(t, bin)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	var got string
	testenv.Eventually(t, 30*time.Second, func() bool {
		got, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`window.result`))
		return got != ""
	}, "wait() settled")
	if got != "LEFT abandoned" {
		t.Fatalf("wait() ended with %q, want LEFT abandoned (as a poll says it)", got)
	}
}
