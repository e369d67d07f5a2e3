package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/testenv"
	"usher/internal/token"

	"github.com/nats-io/nats.go/jetstream"
)

// The example follows admissions published the way the admitter publishes
// them, and verifies tokens the way the gateway signs them.
func TestTheExampleFollowsAdmissionsAndVerifiesTokens(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := testenv.NATS(t)
	nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{url}, Replicas: 1}, "example-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	at := time.Now().Truncate(time.Millisecond)
	body, _ := event.Marshal("demo:7", event.TypeAdmitted, "alice", at, event.Admitted{
		Queue: "demo", User: "alice", Seq: 7, TokenID: "demo:7", ReadyAt: at, ExpiresAt: at.Add(time.Minute)})
	if _, err := js.Publish(ctx, event.AdmittedSubject("demo"), body, jetstream.WithMsgID("demo:7")); err != nil {
		t.Fatal(err)
	}
	other, _ := event.Marshal("other:1", event.TypeAdmitted, "bob", at, event.Admitted{Queue: "other", User: "bob", Seq: 1, TokenID: "other:1"})
	if _, err := js.Publish(ctx, event.AdmittedSubject("other"), other); err != nil {
		t.Fatal(err)
	}

	var out testenv.Buffer
	done := make(chan error, 1)
	fctx, stop := context.WithCancel(ctx)
	go func() { done <- run(fctx, []string{"-nats", url, "-queue", "demo"}, &out) }()
	// It waits for its durable consumer, which the admitter declares.
	testenv.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(out.String(), "waiting for the durable consumer example-downstream")
	}, "the example did not say it waits: %q", out.String())
	if err := bus.EnsureDurables(ctx, js, []bus.Durable{bus.DownstreamDurable("example-downstream")}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(out.String(), "admitted alice to demo (place 7), token demo:7")
	}, "the example did not print the admission: %q", out.String())
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "bob") {
		t.Errorf("the example printed another queue's admission: %q", out.String())
	}

	keys, err := token.LoadKeyring(filepath.Join(t.TempDir(), "k.pem"), nil)
	if err != nil {
		t.Fatal(err)
	}
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(keys.JWKS()) }))
	defer jwks.Close()
	tok, _ := keys.Sign(token.Claims{ID: "demo:7", Queue: "demo", User: "alice", ReadyAt: at, ExpiresAt: at.Add(time.Minute)})
	if c, err := verifyToken(ctx, jwks.URL, tok, "demo", at); err != nil || c.Sub != "alice" {
		t.Fatalf("verify = %+v, %v", c, err)
	}
	tests := []struct{ name, tok, queue string }{
		{"another queue", tok, "other"},
		{"tampered", tok[:len(tok)-4] + "AAAA", "demo"},
		{"garbage", "x.y.z", "demo"},
	}
	for _, tt := range tests {
		if _, err := verifyToken(ctx, jwks.URL, tt.tok, tt.queue, at); err == nil {
			t.Errorf("%s: verify accepted it", tt.name)
		}
	}
}
