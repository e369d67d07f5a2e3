package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"usher/internal/config"
	"usher/internal/orders"
)

// Charges in flight at once keep their connections to the gateway for the
// next ones: a second round of as many concurrent charges dials (almost)
// no new connection. net/http's default kept two idle connections per
// host, and every other charge dialed and closed one of its own.
func TestConcurrentChargesReuseTheirConnections(t *testing.T) {
	const inFlight = 16
	var dials atomic.Int64
	var mu sync.Mutex
	arrived, round := 0, make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Answer only once every charge of the round is in: all of them
		// are in flight at once, each on a connection of its own.
		mu.Lock()
		arrived++
		all := round
		if arrived == inFlight {
			close(round)
			arrived, round = 0, make(chan struct{})
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
		fmt.Fprintf(w, `{"paymentId": "pay_%s"}`, r.Header.Get("Idempotency-Key"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	b := newBreaker(slog.New(slog.NewTextHandler(io.Discard, nil)), &fakeShared{}, time.Second, func(float64) {})
	p := newPayments(srv.URL, 5*time.Second, inFlight, b, func(string) {})
	charge := func(round int) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range inFlight {
			wg.Go(func() {
				if _, err := p.Charge(context.Background(), orders.Order{ID: fmt.Sprintf("ord_%d_%d", round, i)}); err != nil {
					t.Errorf("Charge: %v", err)
				}
			})
		}
		wg.Wait()
	}
	charge(1)
	first := dials.Load()
	charge(2)
	// A connection goes back to the idle pool just after its answer is
	// read, so a charge of the next round can, rarely, start before it and
	// dial: a few, not most.
	if again := dials.Load() - first; first != inFlight || again > inFlight/4 {
		t.Fatalf("%d concurrent charges dialed %d connections, then %d more for the next %d; want %d, then at most %d",
			inFlight, first, again, inFlight, inFlight, inFlight/4)
	}
}

// A payment gateway URL without a scheme made every charge's request fail
// to be built, taken for a refusal: every order FAILED payment_declined.
// The worker refuses such a URL at start instead.
func TestAPaymentURLNoChargeCanBeSentToIsRefusedAtStart(t *testing.T) {
	for _, tt := range []struct {
		url   string
		taken bool
	}{
		{"127.0.0.1:8090", false}, {"pgsim:8090", false}, {"ftp://pgsim", false}, {"http://", false},
		{"", true}, {"http://127.0.0.1:8090", true}, {"https://pay.example:443", true},
	} {
		env := config.New(func(k string) string {
			if k == "USHER_PAYMENT_URL" {
				return tt.url
			}
			return ""
		})
		_, err := loadSettings(env)
		if tt.taken && err != nil {
			t.Errorf("USHER_PAYMENT_URL=%q: %v, want it taken", tt.url, err)
		}
		if !tt.taken && (err == nil || !strings.Contains(err.Error(), "USHER_PAYMENT_URL")) {
			t.Errorf("USHER_PAYMENT_URL=%s: %v, want a configuration error naming it", tt.url, err)
		}
	}
}
