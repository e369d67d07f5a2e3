package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"usher/gateway/lineapi"
	"usher/internal/config"
)

// USHER_NOTIFIER_PUBLIC_URL starts every events URL a join or poll
// answers: a value no browser can open stops the start, naming the
// variable, and a trailing slash does not double the path's.
func TestNotifierPublicURLIsCheckedAtStartUp(t *testing.T) {
	tests := []struct {
		value      string
		wantEvents string // the events URL of ticket "t" in queue "demo"; "" when refused
	}{
		{"", "/v1/queues/demo/tickets/t/events"},
		{"http://127.0.0.1:8081", "http://127.0.0.1:8081/v1/queues/demo/tickets/t/events"},
		{"https://events.shop.example/", "https://events.shop.example/v1/queues/demo/tickets/t/events"},
		{"https://shop.example/usher/", "https://shop.example/usher/v1/queues/demo/tickets/t/events"},
		{"notifier:8081", ""},
		{"notifier.example:8081/", ""},
		{"events.shop.example", ""},
		{"ftp://events.shop.example", ""},
		{"https://", ""},
		{"https://user:pw@events.shop.example", ""},
		{"https://events.shop.example/?x=1", ""},
		{"https://events.shop.example/#top", ""},
	}
	for _, tt := range tests {
		env := map[string]string{"USHER_NOTIFIER_PUBLIC_URL": tt.value}
		s, err := loadSettings(config.New(func(k string) string { return env[k] }))
		if tt.wantEvents == "" {
			if err == nil || !strings.Contains(err.Error(), "USHER_NOTIFIER_PUBLIC_URL") {
				t.Errorf("USHER_NOTIFIER_PUBLIC_URL=%q: loadSettings = %v, want refused naming USHER_NOTIFIER_PUBLIC_URL", tt.value, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("USHER_NOTIFIER_PUBLIC_URL=%q: loadSettings = %v, want it to start", tt.value, err)
			continue
		}
		places := lineapi.NewPlaces(nil, s.notifierURL, time.Now, func() float64 { return 0 })
		if got := places.EventsURL("demo", "t"); got != tt.wantEvents {
			t.Errorf("USHER_NOTIFIER_PUBLIC_URL=%q: events URL = %q, want %q", tt.value, got, tt.wantEvents)
		}
	}
}

// USHER_PAGE_CSS_URL goes into every waiting-room page as a <link
// rel=stylesheet href>: a value the shopper's browser would resolve to
// nothing (a bare host, a path relative to /q/, another scheme) or one
// that shows credentials to every shopper stops the start, naming the
// variable; a stylesheet on another site or on the page's own (behind the
// shop's proxy) is taken as written.
func TestPageCSSURLIsCheckedAtStartUp(t *testing.T) {
	tests := []struct {
		value string
		ok    bool
	}{
		{"", true},
		{"https://shop.example/brand.css", true},
		{"http://127.0.0.1:9000/brand.css", true},
		{"https://cdn.shop.example/css/brand.css?v=3", true},
		{"/assets/brand.css", true},
		{"shop.example/brand.css", false},
		{"brand.css", false},
		{"cdn.shop.example:443/brand.css", false},
		{"//cdn.shop.example/brand.css", false},
		{"/\\cdn.shop.example/brand.css", false},
		{"ftp://shop.example/brand.css", false},
		{"javascript:alert(1)", false},
		{"data:text/css,body{color:red}", false},
		{"https://", false},
		{"https:///brand.css", false},
		{"https://user:pw@shop.example/brand.css", false},
		{"https://shop.example/br\tand.css", false},
		{"https://shop example/brand.css", false},
	}
	for _, tt := range tests {
		env := map[string]string{"USHER_PAGE_CSS_URL": tt.value}
		s, err := loadSettings(config.New(func(k string) string { return env[k] }))
		if !tt.ok {
			if err == nil || !strings.Contains(err.Error(), "USHER_PAGE_CSS_URL") {
				t.Errorf("USHER_PAGE_CSS_URL=%q: loadSettings = %v, want refused naming USHER_PAGE_CSS_URL", tt.value, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("USHER_PAGE_CSS_URL=%q: loadSettings = %v, want it to start", tt.value, err)
			continue
		}
		if s.pageCSS != tt.value {
			t.Errorf("USHER_PAGE_CSS_URL=%q: pageCSS = %q, want it as written", tt.value, s.pageCSS)
		}
	}
}

// A key or secret file that cannot be used stops the start with the
// variable that names it, before anything is dialled: the challenge
// secret, and a key file of the shopper's view (each of which
// internal/shopper's TestKeyFilesNameTheVariableOfAnUnusableFile covers).
func TestRunNamesTheVariableOfAnUnusableKeyFile(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.secret")
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, value string
		want        string
	}{
		{"USHER_CHALLENGE_SECRET_FILE", short, "USHER_CHALLENGE_SECRET_FILE=" + short + ": challenge secret: want at least 32 bytes"},
		{"USHER_TICKET_SECRET_FILE", short, "USHER_TICKET_SECRET_FILE=" + short + ": "},
	}
	for _, tt := range tests {
		env := map[string]string{
			"USHER_DATA_DIR": t.TempDir(), tt.name: tt.value,
			// Nothing listens here: run must not get as far as dialling.
			"USHER_NATS_URL": "nats://127.0.0.1:1", "USHER_REDIS_URL": "redis://127.0.0.1:1",
		}
		err := run(context.Background(), func(k string) string { return env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run with %s=%s = %v, want an error saying %q", tt.name, tt.value, err, tt.want)
		}
	}
}

// run refuses to start with an incomplete catalog in USHER_PAGE_LANG_DIR,
// naming the missing keys, before it connects to anything.
func TestRunRefusesAnIncompleteLanguage(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "it.json"), []byte(`{"page.title": "Sala d'attesa · {queue}"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"USHER_PAGE_LANG_DIR": dir,
		"USHER_NATS_URL":      "nats://127.0.0.1:1", "USHER_REDIS_URL": "redis://127.0.0.1:1",
	}
	err := run(t.Context(), func(k string) string { return env[k] }, &strings.Builder{})
	if err == nil || !strings.Contains(err.Error(), "it.json: missing keys: check.button, check.checkedAt,") {
		t.Fatalf("run = %v, want it refused, naming the missing keys", err)
	}
}

// USHER_JOIN_GROUPS, USHER_JOIN_LINGER and USHER_JOIN_BATCH set the group
// commit of joins: on by default without a linger, groups of 256; off on
// request; a linger or size past their bounds, or another word for
// on|off, stops the start.
func TestJoinGroupingIsReadAtStartUp(t *testing.T) {
	tests := []struct {
		groups, linger, batch string
		off                   bool
		want                  time.Duration
		wantSize              int
		refused               string // the variable the error names; "": starts
	}{
		{"", "", "", false, 0, 256, ""},
		{"on", "1ms", "", false, time.Millisecond, 256, ""},
		{"", "0", "", false, 0, 256, ""},
		{"off", "", "", true, 0, 256, ""},
		{"", "250us", "128", false, 250 * time.Microsecond, 128, ""},
		{"yes", "", "", false, 0, 0, "USHER_JOIN_GROUPS"},
		{"", "2s", "", false, 0, 0, "USHER_JOIN_LINGER"},
		{"", "-1ms", "", false, 0, 0, "USHER_JOIN_LINGER"},
		{"", "", "1025", false, 0, 0, "USHER_JOIN_BATCH"},
		{"", "", "0", false, 0, 0, "USHER_JOIN_BATCH"},
	}
	for _, tt := range tests {
		env := map[string]string{"USHER_JOIN_GROUPS": tt.groups, "USHER_JOIN_LINGER": tt.linger, "USHER_JOIN_BATCH": tt.batch}
		s, err := loadSettings(config.New(func(k string) string { return env[k] }))
		if tt.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tt.refused) {
				t.Errorf("groups %q, linger %q, batch %q: loadSettings = %v, want refused naming %s", tt.groups, tt.linger, tt.batch, err, tt.refused)
			}
			continue
		}
		if s.joins.Off != tt.off {
			t.Errorf("groups %q: off = %v, want %v", tt.groups, s.joins.Off, tt.off)
		}
		if err != nil || s.joins.Linger != tt.want || s.joins.Size != tt.wantSize || s.joins.Backlog != lineapi.DefaultBacklog(tt.wantSize) ||
			!strings.HasPrefix(s.joins.Instance, "gw-") {
			t.Errorf("linger %q, batch %q: joins = %+v, %v; want linger %s, size %d", tt.linger, tt.batch, s.joins, err, tt.want, tt.wantSize)
		}
	}
}

// USHER_JOINS_IN_FLIGHT bounds the joins answered at once (512 by
// default, 0 none), lowered while joins take longer than
// USHER_JOIN_LATENCY_TARGET (250 ms by default, 0 never), and
// USHER_GATE_RECHECK how long a pass's check is
// trusted (1 s by default, 0 never, at most 5 s); anything else stops the
// start, naming the variable.
func TestSheddingAndRecheckAreReadAtStartUp(t *testing.T) {
	tests := []struct {
		inFlight, recheck, target string
		wantInFlight              int
		wantRecheck, wantTarget   time.Duration
		refused                   string
	}{
		{"", "", "", 512, time.Second, 250 * time.Millisecond, ""},
		{"0", "0", "0", 0, 0, 0, ""},
		{"100", "250ms", "1s", 100, 250 * time.Millisecond, time.Second, ""},
		{"-1", "", "", 0, 0, 0, "USHER_JOINS_IN_FLIGHT"},
		{"", "6s", "", 0, 0, 0, "USHER_GATE_RECHECK"},
		{"", "soon", "", 0, 0, 0, "USHER_GATE_RECHECK"},
		{"", "", "-1s", 0, 0, 0, "USHER_JOIN_LATENCY_TARGET"},
	}
	for _, tt := range tests {
		env := map[string]string{"USHER_JOINS_IN_FLIGHT": tt.inFlight, "USHER_GATE_RECHECK": tt.recheck, "USHER_JOIN_LATENCY_TARGET": tt.target}
		s, err := loadSettings(config.New(func(k string) string { return env[k] }))
		if tt.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tt.refused) {
				t.Errorf("in flight %q, recheck %q: loadSettings = %v, want refused naming %s", tt.inFlight, tt.recheck, err, tt.refused)
			}
			continue
		}
		if err != nil || s.joinsInFlight != tt.wantInFlight || s.gateRecheck != tt.wantRecheck || s.joinLatency != tt.wantTarget {
			t.Errorf("in flight %q, recheck %q, target %q: %d, %s, %s, %v; want %d, %s, %s", tt.inFlight, tt.recheck, tt.target,
				s.joinsInFlight, s.gateRecheck, s.joinLatency, err, tt.wantInFlight, tt.wantRecheck, tt.wantTarget)
		}
	}
}

// USHER_JOIN_READY_WAIT bounds how long a join that can be admitted at
// once waits for it in its own answer: half a second by default, at most
// ten; anything else stops the start, naming the variable.
func TestJoinReadyWaitIsReadAtStartUp(t *testing.T) {
	checkOneVariable(t, "USHER_JOIN_READY_WAIT", func(s settings) time.Duration { return s.readyWait }, []oneVariable[time.Duration]{
		{"", 500 * time.Millisecond, false},
		{"3s", 3 * time.Second, false},
		{"10s", 10 * time.Second, false},
		{"11s", 0, true},
		{"0", 0, true},
		{"soon", 0, true},
	})
}

// USHER_GATEWAY_MAX_CONNS bounds the connections the public listener
// holds (10,000 by default, 0 none); anything else stops the start,
// naming the variable.
func TestMaxConnsIsReadAtStartUp(t *testing.T) {
	checkOneVariable(t, "USHER_GATEWAY_MAX_CONNS", func(s settings) int { return s.maxConns }, []oneVariable[int]{
		{"", 10000, false},
		{"0", 0, false},
		{"50000", 50000, false},
		{"-1", 0, true},
		{"many", 0, true},
	})
}

// oneVariable is a start-up with one variable set to value: the setting
// it reads as, or that the start is refused.
type oneVariable[T comparable] struct {
	value   string
	want    T
	refused bool
}

// checkOneVariable starts the gateway's settings with variable name set
// to each case's value, and checks what read finds, or that the start is
// refused naming the variable.
func checkOneVariable[T comparable](t *testing.T, name string, read func(settings) T, cases []oneVariable[T]) {
	t.Helper()
	for _, tt := range cases {
		env := map[string]string{name: tt.value}
		s, err := loadSettings(config.New(func(k string) string { return env[k] }))
		if tt.refused {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%q: loadSettings = %v, want refused naming it", name, tt.value, err)
			}
			continue
		}
		if got := read(s); err != nil || got != tt.want {
			t.Errorf("%s=%q: %v, %v; want %v", name, tt.value, got, err, tt.want)
		}
	}
}
