package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// client speaks usher's HTTP API for one shopper.
type client struct {
	base   string
	http   *http.Client
	out    io.Writer
	header http.Header // who the shopper is
}

// problem is an RFC 9457 answer of the gateway, with the members the app
// acts on.
type problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Reason    string `json:"reason"`
	Challenge *struct {
		Challenge  string `json:"challenge"`
		Difficulty int    `json:"difficulty"`
	} `json:"challenge"`
}

func (p *problem) Error() string {
	return fmt.Sprintf("%d %s: %s", p.Status, p.Type, p.Detail)
}

// do makes one call and reads its JSON answer into out (a problem into an
// error). A 429 or 503 is tried again after its Retry-After plus a random
// part of a doubling window (full jitter), eight times at most.
func (c *client) do(ctx context.Context, method, u string, h http.Header, body []byte, out any) (int, error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		for k, v := range c.header {
			req.Header[k] = v
		}
		for k, v := range h {
			req.Header[k] = v
		}
		res, err := c.http.Do(req)
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		if err != nil {
			return 0, err
		}
		if (res.StatusCode == 429 || res.StatusCode == 503) && attempt < 8 {
			after, _ := strconv.Atoi(res.Header.Get("Retry-After"))
			window := min(500*time.Millisecond<<attempt, 30*time.Second)
			wait := time.Duration(after)*time.Second + rand.N(window)
			fmt.Fprintf(c.out, "busy (%d): trying again in %s\n", res.StatusCode, wait.Round(time.Millisecond))
			if err := sleep(ctx, wait); err != nil {
				return 0, err
			}
			continue
		}
		if res.StatusCode >= 300 {
			p := &problem{Status: res.StatusCode}
			_ = json.Unmarshal(b, p)
			return res.StatusCode, p
		}
		if out != nil && len(b) > 0 {
			if err := json.Unmarshal(b, out); err != nil {
				return res.StatusCode, fmt.Errorf("%s %s: %w", method, u, err)
			}
		}
		return res.StatusCode, nil
	}
}

func (c *client) ticketsURL(queue string) string {
	return c.base + "/v1/queues/" + url.PathEscape(queue) + "/tickets"
}

// join takes a place in line. A queue that asks for a proof of work
// answers 428 with a challenge; the app solves it and joins again with the
// Usher-PoW header.
func (c *client) join(ctx context.Context, queue string) (state, error) {
	h := http.Header{}
	for tries := 0; ; tries++ {
		var st state
		_, err := c.do(ctx, http.MethodPost, c.ticketsURL(queue), h, nil, &st)
		var p *problem
		if errors.As(err, &p) && p.Status == http.StatusPreconditionRequired && p.Challenge != nil && tries < 3 {
			fmt.Fprintf(c.out, "proof of work: %d bits\n", p.Challenge.Difficulty)
			nonce, err := solve(ctx, p.Challenge.Challenge, p.Challenge.Difficulty)
			if err != nil {
				return st, err
			}
			h.Set("Usher-PoW", p.Challenge.Challenge+":"+nonce)
			continue
		}
		if err != nil {
			return st, fmt.Errorf("join %s: %w", queue, err)
		}
		return st, nil
	}
}

// solve finds the smallest decimal nonce such that SHA-256 of
// challenge:nonce begins with difficulty zero bits (docs/api.md, "Proof of
// work at the door").
func solve(ctx context.Context, challenge string, difficulty int) (string, error) {
	buf := []byte(challenge + ":")
	n := len(buf)
	for nonce := uint64(0); ; nonce++ {
		if nonce%(1<<16) == 0 && ctx.Err() != nil {
			return "", ctx.Err()
		}
		buf = strconv.AppendUint(buf[:n], nonce, 10)
		if zeroBits(sha256.Sum256(buf)) >= difficulty {
			return strconv.FormatUint(nonce, 10), nil
		}
	}
}

func zeroBits(sum [32]byte) int {
	n := 0
	for _, b := range sum {
		if b != 0 {
			return n + bits.LeadingZeros8(b)
		}
		n += 8
	}
	return n
}

// poll asks the gateway where the ticket stands.
func (c *client) poll(ctx context.Context, st state) (state, error) {
	var next state
	if _, err := c.do(ctx, http.MethodGet, c.ticketsURL(st.Queue)+"/"+url.PathEscape(st.Ticket), nil, nil, &next); err != nil {
		return st, fmt.Errorf("poll: %w", err)
	}
	return next, nil
}

// stream reads the ticket's event stream, saying each place, until READY
// or an ending (returned), or until the stream breaks (an error: the
// caller polls, then opens it again with the last event's id, which the
// notifier answers with the current state at once).
func (c *client) stream(ctx context.Context, st state, lastID *string) (state, error) {
	// A heartbeat comes every 15 s: a stream silent for three is dead,
	// however long TCP would take to notice.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchdog := time.AfterFunc(silence, cancel)
	defer watchdog.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.Events, nil)
	if err != nil {
		return st, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *lastID != "" {
		req.Header.Set("Last-Event-ID", *lastID)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return st, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return st, fmt.Errorf("event stream: HTTP %d", res.StatusCode)
	}
	sc := bufio.NewScanner(res.Body)
	var event string
	var data []string
	for sc.Scan() {
		watchdog.Reset(silence)
		line := strings.TrimSuffix(sc.Text(), "\r")
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if len(data) > 0 && c.apply(&st, event, strings.Join(data, "\n")) {
				return st, nil
			}
			event, data = "", nil
		case field == "event":
			event = value
		case field == "data":
			data = append(data, value)
		case field == "id":
			*lastID = value
		}
	}
	if err := sc.Err(); err != nil {
		return st, err
	}
	return st, errors.New("event stream ended")
}

// silence is how long a stream may say nothing, heartbeats included.
const silence = 45 * time.Second

// apply takes one event into the state; done once READY or ended.
func (c *client) apply(st *state, event, data string) (done bool) {
	var d state
	if err := json.Unmarshal([]byte(data), &d); err != nil {
		return false
	}
	switch event {
	case "position":
		st.Status, st.Position, st.Waiting, st.ETASeconds = "WAITING", d.Position, d.Waiting, d.ETASeconds
	case "prequeue":
		st.Status, st.OpensAt = "PRE_QUEUE", d.OpensAt
	case "ready":
		st.Status, st.Token, st.ReadyAt, st.ExpiresAt = "READY", d.Token, d.ReadyAt, d.ExpiresAt
		return true
	case "expired":
		st.Status = "EXPIRED"
		return true
	case "closed":
		st.Status, st.Reason = closedStatus(d.Reason), d.Reason
		return true
	default:
		return false
	}
	c.say(*st)
	return false
}

func closedStatus(reason string) string {
	switch reason {
	case "used":
		return "USED"
	case "left":
		return "LEFT"
	}
	return "CLOSED"
}

// order places the order with the entry token on usher's order path and
// follows it until it is final.
func (c *client) order(ctx context.Context, token, sku string, quantity int) error {
	body, _ := json.Marshal(map[string]any{"sku": sku, "quantity": quantity})
	h := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}}
	var o struct{ OrderID, Status, Reason string }
	if _, err := c.do(ctx, http.MethodPost, c.base+"/v1/orders", h, body, &o); err != nil {
		return fmt.Errorf("order: %w", err)
	}
	for o.Status == "PENDING" {
		if err := sleep(ctx, 300*time.Millisecond); err != nil {
			return err
		}
		if _, err := c.do(ctx, http.MethodGet, c.base+"/v1/orders/"+url.PathEscape(o.OrderID), nil, nil, &o); err != nil {
			return fmt.Errorf("order %s: %w", o.OrderID, err)
		}
	}
	if o.Reason != "" {
		o.Status += " (" + o.Reason + ")"
	}
	fmt.Fprintf(c.out, "order %s: %s\n", o.OrderID, o.Status)
	if o.Status != "PAID" {
		return fmt.Errorf("order %s ended %s", o.OrderID, o.Status)
	}
	return nil
}

// checkout sends the entry token with the app's own checkout call: the
// shop's service verifies it offline (JWKS) and keeps one order per token
// (its jti) itself.
func (c *client) checkout(ctx context.Context, u, token, sku string, quantity int) error {
	body, _ := json.Marshal(map[string]any{"sku": sku, "quantity": quantity})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("checkout: %w", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	fmt.Fprintf(c.out, "checkout: %d %s\n", res.StatusCode, bytes.TrimSpace(b))
	if res.StatusCode >= 300 {
		return fmt.Errorf("checkout answered %d", res.StatusCode)
	}
	return nil
}
