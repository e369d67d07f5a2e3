package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Abandonment with every service: 1,000 wait; 350 keep the page open
// on the notifier's stream, 350 poll, 300 close the tab. Once
// abandonAfterSeconds have passed since the last join, the 700 who are
// there hold places 1..700 of a line of 700, and the 300 are told they
// left, reason abandoned.
func TestShoppersWhoClosedTheTabLeaveTheLine(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for the abandonment timeout")
	}
	s := newShop(t)
	const after = 10 // seconds, the least a queue may set
	// Paused: nobody is admitted, so places move only by abandonment.
	s.configure(fmt.Sprintf(`{"targetActive": 5, "state": "paused", "abandonAfterSeconds": %d, "rateLimit": {"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 0}}`, after))

	type shopper struct{ ticket, events string }
	shoppers := make([]shopper, 1000)
	stream := func(ctx context.Context, sh shopper) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.nt+sh.events, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("stream: %v", err)
			return
		}
		defer res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("stream: %s", res.Status)
			return
		}
		io.Copy(io.Discard, res.Body) // held open until the test ends
	}
	// Each shopper who stays shows it from their join on: a stream opens,
	// or polls start, as soon as they hold a ticket, so however long the
	// thousand joins take, only the silent ones go without a sign for
	// longer than the window.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// A polling shopper polls every two seconds from their join on, each
	// on their own, as their page would: however slow one poll is, the
	// others keep their pace.
	poll := func(tk string) {
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/v1/queues/"+s.queue+"/tickets/"+tk, nil)
			if res, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}
	for i := range shoppers {
		code, b := s.join(fmt.Sprintf("s%04d", i))
		if code != 202 {
			t.Fatalf("join %d = %d %v", i, code, b)
		}
		sh := shopper{b["ticket"].(string), b["events"].(string)}
		shoppers[i] = sh
		switch {
		case i >= 650:
			wg.Add(1)
			go func() {
				defer wg.Done()
				poll(sh.ticket)
			}()
		case i >= 300:
			wg.Add(1)
			go func() {
				defer wg.Done()
				stream(ctx, sh)
			}()
		}
	}
	silent := shoppers[:300]
	time.Sleep(after*time.Second + 5*time.Second)

	_, v := call(t, "GET", s.base+"/v1/admin/queues/"+s.queue, "", s.admin)
	if v["waiting"] != float64(700) {
		t.Fatalf("waiting %v after %d s, want 700", v["waiting"], after+5)
	}
	for i, sh := range shoppers[300:] {
		p := s.poll(sh.ticket)
		if p["status"] != "WAITING" || p["position"] != float64(i+1) || p["waiting"] != float64(700) {
			t.Fatalf("shopper %d = %v; want WAITING at %d of 700", 300+i, p, i+1)
		}
	}
	for i, sh := range silent {
		if p := s.poll(sh.ticket); p["status"] != "LEFT" || p["reason"] != "abandoned" {
			t.Fatalf("silent shopper %d = %v; want LEFT, abandoned", i, p)
		}
	}
	// Counted, per queue.
	if m := metricValue(t, "http://"+s.adm+"/metrics", `usher_abandoned_total{queue="`+s.queue+`"}`); m != "300" {
		t.Fatalf("usher_abandoned_total = %q, want 300", m)
	}
}

// metricValue reads one series' value from a Prometheus text page.
func metricValue(t testing.TB, url, series string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}
