package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"usher/internal/catalog"
)

// adminAPI stands in for the gateway's admin routes with their contract:
// Bearer token, PUT replaces the whole configuration (unknown fields are
// refused), GET answers the configuration with live figures. The gateway's
// own tests cover the real handlers; this checks what usherctl sends.
type adminAPI struct {
	mu     sync.Mutex
	queues map[string]catalog.Config
	by     []string // X-Admin-User of every PUT
}

func (a *adminAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer dev-admin-token" {
		http.Error(w, `{"status":401,"title":"Unauthorized"}`, http.StatusUnauthorized)
		return
	}
	view := func(c catalog.Config) map[string]any {
		b, _ := json.Marshal(c)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		m["waiting"], m["active"] = 3, 1
		return m
	}
	name := strings.TrimPrefix(r.URL.Path, "/v1/admin/queues/")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/admin/queues":
		list := []map[string]any{}
		for _, c := range a.queues {
			list = append(list, view(c))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"queues": list})
	case r.Method == http.MethodGet:
		c, ok := a.queues[name]
		if !ok {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"type":"https://usher.dev/problems/unknown-queue","status":404,"title":"Not Found","detail":"no queue named \"` + name + `\""}`))
			return
		}
		_ = json.NewEncoder(w).Encode(view(c))
	case r.Method == http.MethodPut:
		var c catalog.Config
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil || len(c.Validate()) > 0 {
			http.Error(w, `{"status":400,"title":"Bad Request","detail":"invalid config"}`, http.StatusBadRequest)
			return
		}
		_, existed := a.queues[name]
		a.queues[name] = c
		a.by = append(a.by, r.Header.Get("X-Admin-User"))
		if !existed {
			w.WriteHeader(http.StatusCreated)
		}
		_ = json.NewEncoder(w).Encode(c)
	case r.Method == http.MethodDelete:
		c, ok := a.queues[name]
		switch {
		case !ok:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"type":"https://usher.dev/problems/unknown-queue","status":404,"title":"Not Found","detail":"no queue named \"` + name + `\""}`))
		case c.State != catalog.StateClosed:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"type":"https://usher.dev/problems/queue-open","status":409,"title":"Conflict","detail":"queue ` + name + ` is open: close it first"}`))
		default:
			delete(a.queues, name)
			a.by = append(a.by, r.Header.Get("X-Admin-User"))
			w.WriteHeader(http.StatusNoContent)
		}
	}
}

// queue delete sends the DELETE with who deletes, and says what the
// gateway refused.
func TestQueueDeleteSaysWhatTheGatewaySaid(t *testing.T) {
	api := &adminAPI{queues: map[string]catalog.Config{"drop": catalog.Defaults("drop")}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	env := map[string]string{"USHER_GATEWAY_URL": srv.URL, "USHER_ADMIN_TOKEN": "dev-admin-token", "USER": "ops-ann"}
	r := usherctlWith(t, env, "queue", "delete", "drop")
	if r.code != 1 || r.err == nil || !strings.Contains(r.err.Error(), "409") || !strings.Contains(r.err.Error(), "close it first") {
		t.Fatalf("delete of an open queue = exit %d, %v; want exit 1 with the gateway's 409", r.code, r.err)
	}
	if err := usherctlWith(t, env, "queue", "close", "drop").err; err != nil {
		t.Fatal(err)
	}
	r = usherctlWith(t, env, "queue", "delete", "drop")
	if r.err != nil || !strings.Contains(r.stdout, "queue drop deleted") {
		t.Fatalf("delete of a closed queue = exit %d, %v\n%s", r.code, r.err, r.stdout)
	}
	if _, ok := api.queues["drop"]; ok || api.by[len(api.by)-1] != "ops-ann" {
		t.Errorf("after delete: queues %v, by %v; want it gone, deleted by ops-ann", api.queues, api.by)
	}
	if r := usherctlWith(t, env, "queue", "delete"); r.code != 2 {
		t.Errorf("delete without a queue = exit %d, want 2", r.code)
	}
}

func TestQueueCommandsChangeOnlyWhatTheyName(t *testing.T) {
	api := &adminAPI{queues: map[string]catalog.Config{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	env := map[string]string{"USHER_GATEWAY_URL": srv.URL, "USER": "ops-alice"}
	usherctl := func(args ...string) (string, error) {
		r := usherctlWith(t, env, args...)
		return r.stdout, r.err
	}
	want := catalog.Defaults("drop")
	steps := []struct {
		args   []string
		change func(*catalog.Config)
	}{
		{[]string{"queue", "create", "drop", "--tick-ms", "50"}, func(c *catalog.Config) { c.TickMs = 50 }},
		{[]string{"queue", "set", "drop", "--target-active", "7", "--token-ttl", "2m"}, func(c *catalog.Config) { c.TargetActive, c.TokenTTLSeconds = 7, 120 }},
		{[]string{"queue", "set", "--queue", "drop", "--max-admit-per-tick", "3"}, func(c *catalog.Config) { c.MaxAdmitPerTick = 3 }},
		{[]string{"queue", "set", "drop", "--adaptive", "on", "--adaptive-min", "5", "--adaptive-max", "40"}, func(c *catalog.Config) {
			c.Adaptive = &catalog.Adaptive{Enabled: true, Min: 5, Max: 40}
		}},
		{[]string{"queue", "set", "drop", "--adaptive-max", "80"}, func(c *catalog.Config) { c.Adaptive = &catalog.Adaptive{Enabled: true, Min: 5, Max: 80} }},
		{[]string{"queue", "set", "drop", "--adaptive", "off"}, func(c *catalog.Config) { c.Adaptive = &catalog.Adaptive{Min: 5, Max: 80} }},
		{[]string{"queue", "pause", "drop"}, func(c *catalog.Config) { c.State = catalog.StatePaused }},
		{[]string{"queue", "resume", "drop"}, func(c *catalog.Config) { c.State = catalog.StateOpen }},
		{[]string{"queue", "close", "drop"}, func(c *catalog.Config) { c.State = catalog.StateClosed }},
	}
	for _, s := range steps {
		if _, err := usherctl(s.args...); err != nil {
			t.Fatalf("usherctl %v: %v", s.args, err)
		}
		s.change(&want)
		if got := api.queues["drop"]; !reflect.DeepEqual(got, want) {
			t.Fatalf("after usherctl %v: config %+v, want %+v", s.args, got, want)
		}
	}
	for i, by := range api.by {
		if by != "ops-alice" {
			t.Errorf("PUT %d sent X-Admin-User %q, want $USER ops-alice", i, by)
		}
	}
	if _, err := usherctl("queue", "set", "drop", "--adaptive", "maybe"); exitCode(err) != exitUsage {
		t.Errorf("--adaptive maybe = %v, want a usage error", err)
	}
	if _, err := usherctl("queue", "create", "drop"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("creating an existing queue = %v, want an 'exists' error", err)
	}
	if _, err := usherctl("queue", "set", "nope", "--tick-ms", "20"); exitCode(err) != exitFailure || !strings.Contains(err.Error(), "404") {
		t.Errorf("set of an unknown queue = %v, want the gateway's 404", err)
	}
	out, err := usherctl("queue", "get", "drop")
	if err != nil || !strings.Contains(out, `"targetActive": 7`) || !strings.Contains(out, `"waiting": 3`) {
		t.Errorf("queue get = %q, %v; want the indented view", out, err)
	}
	out, err = usherctl("queue", "list")
	if err != nil || !strings.Contains(out, "QUEUE") || !strings.Contains(out, "drop") || !strings.Contains(out, "closed") {
		t.Errorf("queue list = %q, %v; want a table with drop", out, err)
	}
	env["USHER_ADMIN_TOKEN"] = "wrong"
	if _, err := usherctl("queue", "list"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("queue list with a bad token = %v, want the gateway's 401", err)
	}
}

// A flag's value the gateway would refuse is a bad command line (exit 2),
// and nothing is changed: values wrong in themselves are refused before the
// gateway is asked, the adaptive limit's bounds against the configuration
// it answers.
func TestQueueValuesOutOfRangeAreUsageErrorsAndChangeNothing(t *testing.T) {
	api := &adminAPI{queues: map[string]catalog.Config{"drop": catalog.Defaults("drop")}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	usherctl := func(gateway string, args ...string) error {
		return usherctlWith(t, map[string]string{"USHER_GATEWAY_URL": gateway}, args...).err
	}
	down := "http://127.0.0.1:1" // no gateway: the value alone is wrong
	tests := []struct {
		gateway string
		args    []string
		want    string
	}{
		{down, []string{"queue", "set", "drop", "--target-active", "-5"}, "--target-active -5"},
		{down, []string{"queue", "set", "drop", "--state", "weird"}, "--state weird"},
		{down, []string{"queue", "create", "new", "--tick-ms", "1"}, "--tick-ms 1"},
		{srv.URL, []string{"queue", "set", "drop", "--adaptive", "on", "--adaptive-min", "50", "--adaptive-max", "60"}, "min <= targetActive <= max"},
		{srv.URL, []string{"queue", "set", "drop", "--adaptive", "on"}, "adaptive min and max must be 1..100000"},
	}
	for _, tt := range tests {
		err := usherctl(tt.gateway, tt.args...)
		if exitCode(err) != exitUsage || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("usherctl %v = %v (exit %d), want a usage error about %q", tt.args, err, exitCode(err), tt.want)
		}
	}
	if len(api.by) != 0 || !reflect.DeepEqual(api.queues["drop"], catalog.Defaults("drop")) {
		t.Errorf("after refused command lines: %d PUTs, drop = %+v; want none and drop unchanged", len(api.by), api.queues["drop"])
	}
	if err := usherctl(srv.URL, "queue", "set", "drop", "--adaptive", "on", "--adaptive-min", "5", "--adaptive-max", "60"); err != nil {
		t.Errorf("adaptive bounds around targetActive 20: %v, want accepted", err)
	}
}

// A queue the admitter closed as sold out and ops resume is open for no
// reason: resume kept closedReason sold_out, so a later "queue close" told
// shoppers sold_out and the next restock reopened the queue ops had closed.
func TestResumeForgetsWhyTheQueueClosed(t *testing.T) {
	soldOut := catalog.Defaults("drop")
	soldOut.State, soldOut.ClosedReason = catalog.StateClosed, catalog.ReasonSoldOut
	api := &adminAPI{queues: map[string]catalog.Config{"drop": soldOut}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	env := map[string]string{"USHER_GATEWAY_URL": srv.URL, "USHER_ADMIN_TOKEN": "dev-admin-token"}
	for _, args := range [][]string{{"queue", "resume", "drop"}, {"queue", "close", "drop"}} {
		if err := usherctlWith(t, env, args...).err; err != nil {
			t.Fatalf("usherctl %v: %v", args, err)
		}
		if got := api.queues["drop"]; got.ClosedReason != "" {
			t.Errorf("after usherctl %v: state %s, closedReason %q; want none", args, got.State, got.ClosedReason)
		}
	}
}

// An address with no admin API (the public listener of a gateway that
// serves it on USHER_ADMIN_ADDR only) answers 404 for every admin path:
// "no such queue" denied a queue that exists, and create went on to PUT.
func TestNoAdminAPIAtTheURLIsNotAMissingQueue(t *testing.T) {
	puts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			puts++
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"type":"https://usher.dev/problems/not-found","title":"Not Found","status":404,"detail":"no such resource"}`))
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{"USHER_GATEWAY_URL": srv.URL, "USHER_ADMIN_TOKEN": "dev-admin-token"}
	for _, args := range [][]string{{"queue", "get", "drop"}, {"queue", "pause", "drop"}, {"queue", "create", "drop"}} {
		err := usherctlWith(t, env, args...).err
		if exitCode(err) != exitFailure || errors.Is(err, errNotFound) || !strings.Contains(err.Error(), "USHER_GATEWAY_URL") {
			t.Errorf("usherctl %v against no admin API = %v (exit %d); want a failure naming USHER_GATEWAY_URL, not 'no such queue'", args, err, exitCode(err))
		}
	}
	if puts != 0 {
		t.Errorf("%d PUTs to an address with no admin API; want none", puts)
	}
}

// The gateway records who changed a queue (X-Admin-User, from $USER) only
// as 1-128 printable characters. A USER it would refuse fails a change
// before anything is sent, saying what to do; reads send no name and work
// whatever USER is.
func TestQueueChangesNeedAUserTheGatewayCanRecord(t *testing.T) {
	api := &adminAPI{queues: map[string]catalog.Config{}}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	usherctl := func(user string, args ...string) (string, error) {
		r := usherctlWith(t, map[string]string{"USHER_GATEWAY_URL": srv.URL, "USER": user}, args...)
		return r.stdout, r.err
	}
	longest := strings.Repeat("o", 128)
	if _, err := usherctl(longest, "queue", "create", "drop"); err != nil {
		t.Fatalf("create as a 128-character USER: %v", err)
	}
	for name, user := range map[string]string{"129 characters": strings.Repeat("o", 129), "a line break": "ops\nalice"} {
		_, err := usherctl(user, "queue", "pause", "drop")
		if exitCode(err) != exitFailure || !strings.Contains(err.Error(), "USER") || !strings.Contains(err.Error(), "1-128 printable characters") {
			t.Errorf("pause as a USER of %s = %v, want a failure naming USER and the bound", name, err)
		}
		if out, err := usherctl(user, "queue", "list"); err != nil || !strings.Contains(out, "drop") {
			t.Errorf("list as a USER of %s = %q, %v; want the list", name, out, err)
		}
	}
	if len(api.by) != 1 || api.by[0] != longest || api.queues["drop"].State != catalog.StateOpen {
		t.Errorf("PUTs by %q, state %s: want the create alone, still open", api.by, api.queues["drop"].State)
	}
}
