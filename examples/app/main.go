// Command app is the flow of a native app (a phone app, a desktop program,
// a kiosk) in front of usher, runnable: it joins a queue — solving the
// proof of work when the queue asks for one — follows its place on the
// notifier's event stream, polling the gateway while the stream is down,
// and once READY orders with the entry token: through usher's own order
// path, or in the app's own checkout call, which verifies the token
// offline against the gateway's JWKS (docs/integration.md, "The app
// flow").
//
//	go run ./examples/app -queue demo -user alice -sku demo-sku       # usher's order path
//	go run ./examples/app -queue drop -user alice -checkout https://shop.example/api/checkout
//
// It uses nothing of usher's code, only its HTTP API, as an app in another
// repository would: the standard library, net/http and crypto/sha256.
package main

import (
	"context"
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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("app", flag.ContinueOnError)
	gateway := fs.String("gateway", "http://127.0.0.1:8080", "the gateway's URL")
	queue := fs.String("queue", "demo", "the queue to join")
	user := fs.String("user", "", "the shopper, as X-User-Id (what the shop's proxy sets)")
	userToken := fs.String("user-token", "", "the shopper, as the shop's user JWT (X-User-Token)")
	sku := fs.String("sku", "", "order this SKU through usher once READY")
	quantity := fs.Int("quantity", 1, "units to order")
	checkout := fs.String("checkout", "", "the app's own checkout URL: POST the entry token there instead")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*user == "") == (*userToken == "") {
		return errors.New("give the shopper as -user or -user-token")
	}
	c := &client{base: strings.TrimRight(*gateway, "/"), http: &http.Client{}, out: stdout, header: http.Header{}}
	if *user != "" {
		c.header.Set("X-User-Id", *user)
	} else {
		c.header.Set("X-User-Token", *userToken)
	}
	st, err := c.join(ctx, *queue)
	if err != nil {
		return err
	}
	c.say(st)
	if st, err = c.follow(ctx, st); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "READY: entry token valid until %s\n", st.ExpiresAt)
	switch {
	case *checkout != "":
		return c.checkout(ctx, *checkout, st.Token, *sku, *quantity)
	case *sku != "":
		return c.order(ctx, st.Token, *sku, *quantity)
	default:
		fmt.Fprintln(stdout, st.Token)
		return nil
	}
}

// state is a ticket's state: a join's or poll's answer, or what the
// stream's events say of it.
type state struct {
	Ticket      string `json:"ticket"`
	Queue       string `json:"queue"`
	Status      string `json:"status"`
	Position    int    `json:"position"`
	Waiting     int    `json:"waiting"`
	ETASeconds  *int   `json:"etaSeconds"`
	PollAfterMs int    `json:"pollAfterMs"`
	Events      string `json:"events"`
	Token       string `json:"token"`
	ReadyAt     string `json:"readyAt"`
	ExpiresAt   string `json:"expiresAt"`
	OpensAt     string `json:"opensAt"`
	Reason      string `json:"reason"`
}

// ended reports whether the ticket's turn is over without READY.
func (s state) ended() bool {
	switch s.Status {
	case "EXPIRED", "USED", "LEFT", "CLOSED":
		return true
	}
	return false
}

// say prints where the shopper stands.
func (c *client) say(s state) {
	switch s.Status {
	case "WAITING":
		eta := ""
		if s.ETASeconds != nil {
			eta = fmt.Sprintf(", about %d s", *s.ETASeconds)
		}
		fmt.Fprintf(c.out, "WAITING: place %d of %d%s\n", s.Position, s.Waiting, eta)
	case "PRE_QUEUE":
		fmt.Fprintf(c.out, "PRE_QUEUE: the drop opens at %s\n", s.OpensAt)
	case "READY":
	default:
		fmt.Fprintf(c.out, "%s %s\n", s.Status, s.Reason)
	}
}

// follow waits until the ticket is READY with its token: on the event
// stream, and while the stream is down on polls at pollAfterMs, opening
// the stream again after each; a ticket of a line reset since joins
// again.
func (c *client) follow(ctx context.Context, st state) (state, error) {
	lastID := ""
	for {
		if st.Status == "READY" && st.Token != "" {
			return st, nil
		}
		if st.ended() {
			return st, fmt.Errorf("the turn ended: %s %s", st.Status, st.Reason)
		}
		next, err := c.stream(ctx, st, &lastID)
		if err == nil {
			st = next
			continue
		}
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
		fmt.Fprintf(c.out, "stream down (%v): polling\n", err)
		if err := sleep(ctx, time.Duration(max(st.PollAfterMs, 500))*time.Millisecond); err != nil {
			return st, err
		}
		if st, err = c.pollOrJoin(ctx, st, &lastID); err != nil {
			return st, err
		}
		c.say(st)
	}
}

// pollOrJoin polls the ticket; one of a line reset since (its entries
// stream recreated: 410 ticket-stale) is of no line any more, so the app
// joins again and follows the new one.
func (c *client) pollOrJoin(ctx context.Context, st state, lastID *string) (state, error) {
	next, err := c.poll(ctx, st)
	var p *problem
	if errors.As(err, &p) && p.Status == http.StatusGone && strings.HasSuffix(p.Type, "/ticket-stale") {
		fmt.Fprintln(c.out, "the line was reset: joining again")
		*lastID = ""
		return c.join(ctx, st.Queue)
	}
	return next, err
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
