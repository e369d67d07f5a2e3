package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"usher/internal/testenv"
)

// limitsOff is a queue's rateLimit with every limit off: the test's
// browser and its own calls all come from one loopback address.
const limitsOff = `{"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 0}`

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// pageShop is a shop of the services named whose waiting-room page listens
// on the notifier's stream: the gateway hands out the notifier's URL, and
// the notifier lets pages of the gateway's origin open streams.
func pageShop(t *testing.T, names ...string) *shop {
	t.Helper()
	env := stackEnv(t, "PGSIM_LATENCY_MEAN_MS", "5")
	env["USHER_NOTIFIER_PUBLIC_URL"] = "http://" + env["USHER_NOTIFIER_ADDR"]
	env["USHER_GATEWAY_PUBLIC_URL"] = "http://" + env["USHER_GATEWAY_ADDR"]
	return startShop(t, env, names)
}

// restart starts the named service again, on the same environment and
// address, once a test has stopped it, and waits until it is ready.
func (s *shop) restart(name string) {
	s.t.Helper()
	s.running[name] = start(s.t, name, s.env)
	waitReady(s.t, 30*time.Second, "http://"+s.env["USHER_"+strings.ToUpper(name)+"_ADDR"])
}

// line is a queue of a shop's, for a test t. A line made by heldLine is
// created paused (joins taken, nobody admitted), so that the shoppers a
// test puts in it wait where it puts them; open has the real admitter
// admit them, by its own ticks, when the test is ready for their turn.
type line struct {
	t       *testing.T
	s       *shop
	name    string
	config  map[string]any
	tickets []string // joined by join: open waits for them
}

// queueOf creates queue name with config as it is (a closed queue, a
// drop, one in maintenance).
func (s *shop) queueOf(t *testing.T, name, config string) *line {
	t.Helper()
	l := &line{t: t, s: s.with(t), name: name}
	if err := json.Unmarshal([]byte(config), &l.config); err != nil {
		t.Fatalf("config %s: %v", config, err)
	}
	l.put(201)
	return l
}

// heldLine creates queue name with config, paused until open.
func (s *shop) heldLine(t *testing.T, name, config string) *line {
	t.Helper()
	l := &line{t: t, s: s.with(t), name: name}
	if err := json.Unmarshal([]byte(config), &l.config); err != nil {
		t.Fatalf("config %s: %v", config, err)
	}
	l.config["state"] = "paused"
	l.put(201)
	return l
}

func (l *line) put(want int) {
	l.t.Helper()
	body, _ := json.Marshal(l.config)
	if code, got := call(l.t, "PUT", l.s.base+"/v1/admin/queues/"+l.name, string(body), l.s.admin); code != want {
		l.t.Fatalf("PUT queue %s %s = %d %v, want %d", l.name, body, code, got, want)
	}
}

// page is the line's waiting-room page for user, with more of the query
// (such as "&lang=de") after it.
func (l *line) page(user, more string) string {
	return l.s.base + "/q/" + l.name + "?user=" + user + more
}

// join joins the line over the API as user and returns the ticket.
func (l *line) join(user string) string {
	l.t.Helper()
	code, body := call(l.t, "POST", l.s.base+"/v1/queues/"+l.name+"/tickets", "", map[string]string{"X-User-Id": user})
	if code != 202 {
		l.t.Fatalf("join %s as %s = %d %v", l.name, user, code, body)
	}
	tk, _ := body["ticket"].(string)
	l.tickets = append(l.tickets, tk)
	return tk
}

// poll is the API's answer to a poll of the ticket.
func (l *line) poll(tk string) map[string]any {
	l.t.Helper()
	_, body := call(l.t, "GET", l.s.base+"/v1/queues/"+l.name+"/tickets/"+tk, "", nil)
	return body
}

// open opens the line and waits until the admitter has admitted the
// shoppers who joined by join and those of the tickets given: each READY,
// which a poll says once its readyAt has passed.
func (l *line) open(tickets ...string) {
	l.t.Helper()
	l.config["state"] = "open"
	l.put(200)
	for _, tk := range append(slices.Clone(l.tickets), tickets...) {
		var got map[string]any
		testenv.Eventually(l.t, 30*time.Second, func() bool {
			got = l.poll(tk)
			return got["status"] == "READY"
		}, "ticket %s of %s = %v, want READY once the line is open", tk, l.name, lazy(func() string { return fmt.Sprint(got) }))
	}
}

// lazy formats as what its function returns when the message is built,
// for messages about values a poll keeps changing.
type lazy func() string

func (l lazy) String() string { return l() }
