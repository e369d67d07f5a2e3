// Command downstream is a small, runnable example of a service that lives
// beside usher without calling it: it follows a queue's admissions from
// JetStream through its own durable consumer, and verifies entry tokens
// offline against the gateway's JWKS.
//
// The durable consumer is declared by usher's admitter, never by the
// reader: the admitter declares one for each name in
// USHER_DOWNSTREAM_READERS (make run names example-downstream), holding
// every queue's admissions; the reader binds to it, waiting until it
// exists, and skips the other queues' admissions.
//
//	go run ./examples/downstream -queue demo                  # follow admissions
//	go run ./examples/downstream -verify "$TOKEN" -queue demo # check a token
//
// On a broker with authentication (make run's, compose's) it connects as
// the downstream reader named like its durable consumer, with that
// reader's NKey (make run writes .usher/nats/downstream-example-downstream.nk),
// and may then read USHER_ADMISSIONS through that consumer and nothing
// else; its replies come under _INBOX_downstream-<durable>, the only inbox
// it may read:
//
//	go run ./examples/downstream -nkey .usher/nats/downstream-example-downstream.nk
//
// It uses nothing of usher's code: only the event schema, the JWKS and the
// broker's naming of a downstream reader, as a service in another
// repository would.
package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "downstream:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("downstream", flag.ContinueOnError)
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS URL")
	gateway := fs.String("gateway", "http://127.0.0.1:8080", "gateway base URL (for the JWKS)")
	queue := fs.String("queue", "demo", "queue to follow")
	durable := fs.String("durable", "example-downstream", "durable consumer name")
	verify := fs.String("verify", "", "verify this entry token and exit")
	var c creds
	fs.StringVar(&c.nkey, "nkey", "", "NKey seed file of this downstream reader (a broker with authentication)")
	fs.StringVar(&c.ca, "tls-ca", "", "CA of the broker's TLS certificate")
	fs.StringVar(&c.cert, "tls-cert", "", "client certificate (a broker that verifies clients)")
	fs.StringVar(&c.key, "tls-key", "", "the client certificate's key")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *verify != "" {
		claims, err := verifyToken(ctx, *gateway, *verify, *queue, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "valid: user %s, token %s, usable until %s\n", claims.Sub, claims.Jti, time.Unix(claims.Exp, 0).UTC().Format(time.RFC3339))
		return nil
	}
	nc, err := connect(*natsURL, *durable, c)
	if err != nil {
		return err
	}
	defer nc.Drain()
	return follow(ctx, nc, *queue, *durable, stdout)
}

// creds are how the reader proves who it is, and checks who the broker is.
type creds struct{ nkey, ca, cert, key string }

// connect dials NATS as the downstream reader called durable: its replies
// under its own inbox prefix (the broker lets it read no other), with its
// NKey and TLS when given.
func connect(url, durable string, c creds) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("downstream-" + durable), nats.CustomInboxPrefix("_INBOX_downstream-" + durable)}
	if c.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(c.nkey)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o)
	}
	if c.ca != "" {
		opts = append(opts, nats.RootCAs(c.ca))
	}
	if c.cert != "" {
		opts = append(opts, nats.ClientCert(c.cert, c.key))
	}
	return nats.Connect(url, opts...)
}

// admitted is the data of a usher.admitted.v1 event.
type admitted struct {
	Queue     string    `json:"queue"`
	User      string    `json:"user"`
	Seq       uint64    `json:"seq"`
	TokenID   string    `json:"tokenId"`
	ReadyAt   time.Time `json:"readyAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// follow prints each admission of the queue until ctx ends. The durable
// consumer remembers where it stopped: a restart resumes there.
func follow(ctx context.Context, nc *nats.Conn, queue, durable string, stdout io.Writer) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := bind(ctx, js, durable, stdout)
	if err != nil {
		return err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if m.Subject() != "usher.admitted."+queue {
			_ = m.Ack() // another queue's
			return
		}
		var env struct {
			ID   string   `json:"id"`
			Type string   `json:"type"`
			Data admitted `json:"data"`
		}
		if err := json.Unmarshal(m.Data(), &env); err != nil || env.Type != "usher.admitted.v1" {
			_ = m.Term() // not an event this service understands
			return
		}
		fmt.Fprintf(stdout, "admitted %s to %s (place %d), token %s, ready %s\n",
			env.Data.User, env.Data.Queue, env.Data.Seq, env.Data.TokenID, env.Data.ReadyAt.Format(time.RFC3339Nano))
		_ = m.Ack()
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// bind returns the reader's durable consumer on USHER_ADMISSIONS once
// usher's admitter has declared it, saying once that it waits. A reader
// may look its consumer up, pull from it and acknowledge, but not create
// it: on usher's broker only the admitter creates consumers.
func bind(ctx context.Context, js jetstream.JetStream, durable string, stdout io.Writer) (jetstream.Consumer, error) {
	said := false
	for {
		cons, err := js.Consumer(ctx, "USHER_ADMISSIONS", durable)
		if err == nil {
			return cons, nil
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("consumer %s: %w", durable, err)
		}
		if !said {
			fmt.Fprintf(stdout, "waiting for the durable consumer %s on USHER_ADMISSIONS: usher's admitter declares it when USHER_DOWNSTREAM_READERS names it\n", durable)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// claims are the entry token's claims this service checks.
type claims struct {
	Iss string   `json:"iss"`
	Sub string   `json:"sub"`
	Aud []string `json:"aud"`
	Jti string   `json:"jti"`
	Nbf int64    `json:"nbf"`
	Exp int64    `json:"exp"`
}

// verifyToken checks an EdDSA entry token against the gateway's JWKS:
// signature, issuer, audience (the queue), not-before and expiry.
func verifyToken(ctx context.Context, gateway, tok, queue string, now time.Time) (claims, error) {
	var c claims
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return c, errors.New("not a JWT")
	}
	var hdr struct{ Alg, Kid string }
	if err := decodePart(parts[0], &hdr); err != nil || hdr.Alg != "EdDSA" {
		return c, errors.New("not an EdDSA token")
	}
	keys, err := fetchJWKS(ctx, gateway)
	if err != nil {
		return c, err
	}
	pub, ok := keys[hdr.Kid]
	if !ok {
		return c, fmt.Errorf("unknown key id %q", hdr.Kid)
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err != nil || !ed25519.Verify(pub, []byte(parts[0]+"."+parts[1]), sig) {
		return c, errors.New("bad signature")
	}
	if err := decodePart(parts[1], &c); err != nil {
		return c, err
	}
	switch {
	case c.Iss != "usher":
		return c, errors.New("not issued by usher")
	case len(c.Aud) != 1 || c.Aud[0] != queue:
		return c, fmt.Errorf("token of queue %v, not %s", c.Aud, queue)
	case now.Unix() < c.Nbf:
		return c, errors.New("not valid yet")
	case now.Unix() >= c.Exp:
		return c, errors.New("expired")
	}
	return c, nil
}

func decodePart(s string, v any) error {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// fetchJWKS reads the gateway's Ed25519 keys by key id. A real service
// caches them and refetches on an unknown kid.
func fetchJWKS(ctx context.Context, gateway string) (map[string]ed25519.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", gateway+"/.well-known/jwks.json", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var set struct {
		Keys []struct{ Kty, Crv, X, Kid string }
	}
	if err := json.NewDecoder(res.Body).Decode(&set); err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	keys := map[string]ed25519.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" {
			continue
		}
		if x, err := base64.RawURLEncoding.DecodeString(k.X); err == nil && len(x) == ed25519.PublicKeySize {
			keys[k.Kid] = ed25519.PublicKey(x)
		}
	}
	return keys, nil
}
