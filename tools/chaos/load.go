package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// queueSpec is one queue of the workload: its configuration, its stock and
// how fast shoppers join it.
type queueSpec struct {
	Name            string  `json:"name"`
	TargetActive    int     `json:"targetActive"`
	MaxAdmitPerTick int     `json:"maxAdmitPerTick"`
	TickMs          int     `json:"tickMs"`
	TokenTTLSeconds int     `json:"tokenTtlSeconds"`
	SKU             string  `json:"sku"`
	Stock           int64   `json:"stock"`
	JoinsPerSecond  float64 `json:"joinsPerSecond"`
	// Prefill joins at once when the load starts, so the line is long
	// before the baseline is measured.
	Prefill int `json:"prefill,omitempty"`
	// RateChecked marks the queue whose demand exceeds its fixed rate: its
	// admissions per second are checked and the recovery time measured on it.
	RateChecked bool `json:"rateChecked"`
}

// configuredRate is the admissions per second the queue is set to, 0 when
// it has no per-tick cap.
func (q queueSpec) configuredRate() float64 {
	if q.MaxAdmitPerTick == 0 {
		return 0
	}
	return float64(q.MaxAdmitPerTick) * 1000 / float64(q.TickMs)
}

// adminBody is the queue's PUT /v1/admin/queues body. Rate limits are off:
// every shopper of the load comes from one address.
func (q queueSpec) adminBody() string {
	b, _ := json.Marshal(map[string]any{
		"targetActive": q.TargetActive, "maxAdmitPerTick": q.MaxAdmitPerTick, "tickMs": q.TickMs,
		"tokenTtlSeconds": q.TokenTTLSeconds, "state": "open", "sku": q.SKU, "maxQuantity": 1,
		"rateLimit": map[string]int{"perIpPerSecond": 0, "perIpBurst": 0, "perUserPerSecond": 0, "perUserBurst": 0, "ordersPerSecond": 0},
	})
	return string(b)
}

// shopper behaviour shares, out of 100.
const (
	pctSSE      = 45 // wait on the notifier's event stream
	pctPoll     = 45 // wait by polling the gateway; the rest join and never look
	pctLeave    = 8  // leave the line after a short wait
	pctOrder    = 80 // of the admitted who learn it: order; the rest let the token expire
	maxAttempts = 4  // per join, order submit
)

// load is the load client: shoppers join at a steady rate, wait by SSE or
// polling, order once admitted, some leave; every answer goes to the
// journal.
type load struct {
	j         *journal
	queues    []queueSpec
	seed      uint64
	token     string
	gateways  []string
	notifiers []string
	run       string // prefix of user ids, unique per scenario run
	http      *http.Client
	sse       *http.Client
	wg        sync.WaitGroup
	n         atomic.Uint64
	accepted  atomic.Int64
	failed    atomic.Int64
	paid      atomic.Int64 // orders the load has seen PAID
}

func newLoad(j *journal, s *stack, queues []queueSpec, seed uint64, run string) *load {
	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}
	l := &load{j: j, queues: queues, seed: seed, token: s.token, run: run,
		http: &http.Client{Transport: tr, Timeout: 5 * time.Second},
		sse:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	for _, sv := range s.servicesOf(kindGateway) {
		l.gateways = append(l.gateways, sv.url())
	}
	for _, sv := range s.servicesOf(kindNotifier) {
		l.notifiers = append(l.notifiers, sv.url())
	}
	return l
}

// start sends joins until joinCtx ends; shoppers keep going (waiting,
// ordering) until shopCtx ends. wait returns when every shopper is done.
func (l *load) start(joinCtx, shopCtx context.Context) {
	for qi, q := range l.queues {
		for range q.Prefill {
			n := l.n.Add(1)
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.shop(shopCtx, q, qi, n)
			}()
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			every := time.Duration(float64(time.Second) / q.JoinsPerSecond)
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-joinCtx.Done():
					return
				case <-t.C:
				}
				n := l.n.Add(1)
				l.wg.Add(1)
				go func() {
					defer l.wg.Done()
					l.shop(shopCtx, q, qi, n)
				}()
			}
		}()
	}
}

func (l *load) wait() { l.wg.Wait() }

// shop is one shopper's whole visit. Their choices come from a source
// seeded by the run's seed and their number, so a seed replays the same
// crowd.
func (l *load) shop(ctx context.Context, q queueSpec, qi int, n uint64) {
	rng := rand.New(rand.NewPCG(l.seed, n))
	user := fmt.Sprintf("%s-%s-%d", l.run, q.Name, n)
	gw := int(n) % len(l.gateways)
	ticket, ok := l.join(ctx, q, user, &gw)
	if !ok {
		return
	}
	seq, _ := ticketSeq(ticket)
	mode := rng.IntN(100)
	leaveAfter := time.Duration(0)
	if rng.IntN(100) < pctLeave {
		leaveAfter = time.Second + time.Duration(rng.Int64N(int64(3*time.Second)))
	}
	orders := rng.IntN(100) < pctOrder
	if mode >= pctSSE+pctPoll {
		return // joined, never looks again: the token expires unused
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if leaveAfter > 0 {
		// The leaver rotates gateways on its own index: the waiter, which
		// may still be finishing a request when told to stop, moves gw.
		leaveGW := gw
		go func() {
			select {
			case <-wctx.Done():
				return
			case <-time.After(leaveAfter):
			}
			cancel()
			l.leave(ctx, q, user, ticket, seq, &leaveGW)
		}()
	}
	var tok string
	if mode < pctSSE {
		tok = l.waitSSE(wctx, q, user, ticket, seq, int(n)%len(l.notifiers), &gw)
	} else {
		tok = l.waitPoll(wctx, q, user, ticket, seq, &gw)
	}
	if tok == "" || !orders || ctx.Err() != nil {
		return
	}
	cancel() // READY: no more leaving
	l.order(ctx, q, user, tok, &gw)
}

// do sends one request and decodes a JSON body into out (when given).
func (l *load) do(ctx context.Context, method, url, body string, hdr map[string]string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := l.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return res.StatusCode, err
	}
	if out != nil && len(b) > 0 {
		_ = json.Unmarshal(b, out)
	}
	return res.StatusCode, nil
}

// placeAnswer is the part of join and poll answers the load reads.
type placeAnswer struct {
	Ticket      string     `json:"ticket"`
	Status      string     `json:"status"`
	Position    int64      `json:"position"`
	PollAfterMs int64      `json:"pollAfterMs"`
	Token       string     `json:"token"`
	ReadyAt     *time.Time `json:"readyAt"`
	Reason      string     `json:"reason"`
	Detail      string     `json:"detail"`
}

// join joins, retrying on the other gateway when one does not answer or
// answers 5xx; a retry is the same attempt (the gateway dedupes it).
func (l *load) join(ctx context.Context, q queueSpec, user string, gw *int) (string, bool) {
	for attempt := range maxAttempts {
		var a placeAnswer
		code, err := l.do(ctx, "POST", l.gateways[*gw]+"/v1/queues/"+q.Name+"/tickets", "", map[string]string{"X-User-Id": user}, &a)
		r := record{Kind: recJoin, Queue: q.Name, User: user, Code: code, Ticket: a.Ticket, Position: a.Position,
			Via: fmt.Sprintf("gateway-%d", *gw+1), Status: a.Status}
		if err != nil {
			r.Err = err.Error()
		}
		if a.Ticket != "" {
			r.Seq, _ = ticketSeq(a.Ticket)
		} else {
			r.Detail = a.Detail
		}
		l.j.add(r)
		if (code == 202 || code == 200) && a.Ticket != "" {
			l.accepted.Add(1)
			return a.Ticket, true
		}
		if ctx.Err() != nil || (code >= 400 && code < 500) {
			break
		}
		*gw = (*gw + 1) % len(l.gateways)
		if !sleepCtx(ctx, time.Duration(200*(attempt+1))*time.Millisecond) {
			break
		}
	}
	l.failed.Add(1)
	return "", false
}

// waitPoll polls until READY (returns the token), a final status, or ctx.
func (l *load) waitPoll(ctx context.Context, q queueSpec, user, ticket string, seq uint64, gw *int) string {
	wait := 300 * time.Millisecond
	for sleepCtx(ctx, wait) {
		var a placeAnswer
		code, err := l.do(ctx, "GET", l.gateways[*gw]+"/v1/queues/"+q.Name+"/tickets/"+ticket, "", nil, &a)
		if err != nil || code >= 500 {
			*gw = (*gw + 1) % len(l.gateways)
			wait = time.Second
			continue
		}
		switch a.Status {
		case "READY":
			l.ready(q, user, seq, a.Token, a.ReadyAt, "poll")
			return a.Token
		case "WAITING":
			wait = min(max(time.Duration(a.PollAfterMs)*time.Millisecond, 200*time.Millisecond), 5*time.Second)
		default:
			return "" // EXPIRED, USED, LEFT, CLOSED: this visit is over
		}
	}
	return ""
}

func (l *load) ready(q queueSpec, user string, seq uint64, tok string, readyAt *time.Time, via string) {
	l.j.add(record{Kind: recReady, Queue: q.Name, User: user, Seq: seq, TokenID: tokenID(tok), ReadyAt: readyAt, Via: via})
}

// tokenID reads the jti claim of an entry token without verifying it: the
// checks compare it with the admission events.
func tokenID(tok string) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		ID string `json:"jti"`
	}
	_ = json.Unmarshal(b, &c)
	return c.ID
}

// waitSSE follows the notifier's event stream until READY, reconnecting
// (to the other notifier, as a load balancer would) when it breaks.
func (l *load) waitSSE(ctx context.Context, q queueSpec, user, ticket string, seq uint64, nt int, gw *int) string {
	lastID := ""
	for ctx.Err() == nil {
		tok, readyAt, final, id, err := l.stream(ctx, l.notifiers[nt]+"/v1/queues/"+q.Name+"/tickets/"+ticket+"/events", lastID)
		if id != "" {
			lastID = id
		}
		if tok != "" {
			l.ready(q, user, seq, tok, readyAt, "sse")
			return tok
		}
		if final {
			return ""
		}
		_ = err
		nt = (nt + 1) % len(l.notifiers)
		if !sleepCtx(ctx, time.Second) {
			return ""
		}
	}
	return ""
}

// stream reads one SSE connection: the token when READY came, final when
// the stream said the visit is over (expired, closed).
func (l *load) stream(ctx context.Context, url, lastID string) (tok string, readyAt *time.Time, final bool, id string, err error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return "", nil, false, "", err
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := l.sse.Do(req)
	if err != nil {
		return "", nil, false, "", err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return "", nil, res.StatusCode == 401 || res.StatusCode == 404, "", fmt.Errorf("status %d", res.StatusCode)
	}
	sc := bufio.NewScanner(res.Body)
	var ev, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			switch ev {
			case "ready":
				var d struct {
					Token   string     `json:"token"`
					ReadyAt *time.Time `json:"readyAt"`
				}
				_ = json.Unmarshal([]byte(data), &d)
				return d.Token, d.ReadyAt, false, id, nil
			case "expired", "closed":
				return "", nil, true, id, nil
			}
			ev, data = "", ""
		case strings.HasPrefix(line, "event:"):
			ev = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		}
	}
	if err := sc.Err(); err != nil {
		return "", nil, false, id, err
	}
	return "", nil, false, id, errors.New("stream ended")
}

func (l *load) leave(ctx context.Context, q queueSpec, user, ticket string, seq uint64, gw *int) {
	for attempt := range maxAttempts {
		code, err := l.do(ctx, "DELETE", l.gateways[*gw]+"/v1/queues/"+q.Name+"/tickets/"+ticket, "", nil, nil)
		r := record{Kind: recLeave, Queue: q.Name, User: user, Seq: seq, Code: code, Ticket: ticket}
		if err != nil {
			r.Err = err.Error()
		}
		l.j.add(r)
		if code == 204 || (code >= 400 && code < 500) || ctx.Err() != nil {
			return
		}
		*gw = (*gw + 1) % len(l.gateways)
		if !sleepCtx(ctx, time.Duration(300*(attempt+1))*time.Millisecond) {
			return
		}
	}
}

// orderAnswer is the part of order answers the load reads.
type orderAnswer struct {
	OrderID string `json:"orderId"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Detail  string `json:"detail"`
}

// order submits the order (retrying the same token, which is the same
// order) and follows it to its final status.
func (l *load) order(ctx context.Context, q queueSpec, user, tok string, gw *int) {
	body := fmt.Sprintf(`{"sku":%q,"quantity":1}`, q.SKU)
	hdr := map[string]string{"X-User-Id": user, "Authorization": "Bearer " + tok}
	var id string
	for attempt := 0; attempt < maxAttempts+2 && id == ""; attempt++ {
		var a orderAnswer
		code, err := l.do(ctx, "POST", l.gateways[*gw]+"/v1/orders", body, hdr, &a)
		r := record{Kind: recOrder, Queue: q.Name, User: user, TokenID: tokenID(tok), Code: code, OrderID: a.OrderID, Status: a.Status, Detail: a.Detail}
		if err != nil {
			r.Err = err.Error()
		}
		l.j.add(r)
		switch {
		case (code == 202 || code == 200) && a.OrderID != "":
			id = a.OrderID
		case code == 425: // before nbf: READY came a moment early for this clock
			if !sleepCtx(ctx, 200*time.Millisecond) {
				return
			}
		case code >= 400 && code < 500, ctx.Err() != nil:
			return
		default:
			*gw = (*gw + 1) % len(l.gateways)
			if !sleepCtx(ctx, time.Duration(300*(attempt+1))*time.Millisecond) {
				return
			}
		}
	}
	if id == "" {
		return
	}
	for sleepCtx(ctx, 400*time.Millisecond) {
		var a orderAnswer
		code, err := l.do(ctx, "GET", l.gateways[*gw]+"/v1/orders/"+id, "", map[string]string{"X-User-Id": user}, &a)
		if err != nil || code >= 500 {
			*gw = (*gw + 1) % len(l.gateways)
			continue
		}
		if a.Status == "PAID" {
			l.paid.Add(1)
		}
		if a.Status == "PAID" || a.Status == "FAILED" || a.Status == "REJECTED" {
			l.j.add(record{Kind: recOrderFinal, Queue: q.Name, User: user, TokenID: tokenID(tok), OrderID: id, Status: a.Status, Detail: a.Reason})
			return
		}
	}
}

// sleepCtx sleeps d unless ctx ends first; it reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
