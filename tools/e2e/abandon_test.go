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
// on the notifier's stream, 350 poll, 300 close the tab. After
// abandonAfterSeconds the 700 who are there hold places 1..700 of a line
// of 700, and the 300 are told they left, reason abandoned.
func TestShoppersWhoClosedTheTabLeaveTheLine(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the abandonment timeout")
	}
	s := newShop(t)
	const after = 10 // seconds, the least a queue may set
	// Paused: nobody is admitted, so places move only by abandonment.
	s.configure(fmt.Sprintf(`{"targetActive": 5, "state": "paused", "abandonAfterSeconds": %d, "rateLimit": {"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 0}}`, after))

	type shopper struct{ ticket, events string }
	shoppers := make([]shopper, 1000)
	for i := range shoppers {
		code, b := s.join(fmt.Sprintf("s%04d", i))
		if code != 202 {
			t.Fatalf("join %d = %d %v", i, code, b)
		}
		shoppers[i] = shopper{b["ticket"].(string), b["events"].(string)}
	}
	streams, polling, silent := shoppers[300:650], shoppers[650:], shoppers[:300]

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, sh := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
		}()
	}
	deadline := time.Now().Add(after*time.Second + 5*time.Second)
	for time.Now().Before(deadline) {
		for _, sh := range polling {
			s.poll(sh.ticket)
		}
		time.Sleep(2 * time.Second)
	}

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
