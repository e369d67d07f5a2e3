package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"usher/internal/catalog"
	"usher/internal/event"
)

// adminClient speaks the gateway's admin API.
type adminClient struct {
	base  string
	token string
	user  string // sent as X-Admin-User, so the config-change audit says who
	hc    *http.Client
}

// errNotFound is a queue the gateway does not know.
var errNotFound = errors.New("no such queue")

// apiError is a problem+json answer of the gateway.
type apiError struct {
	Type          string `json:"type"`
	Status        int    `json:"status"`
	Title         string `json:"title"`
	Detail        string `json:"detail"`
	InvalidParams []struct {
		Name   string `json:"name"`
		Reason string `json:"reason"`
	} `json:"invalid-params"`
}

func (e *apiError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gateway answered %d", e.Status)
	if e.Title != "" {
		b.WriteString(" " + e.Title)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for _, p := range e.InvalidParams {
		fmt.Fprintf(&b, "; %s %s", p.Name, p.Reason)
	}
	return b.String()
}

func (a *adminClient) do(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if method != http.MethodGet {
		// Only a change is audited; a read sends no name, so an odd USER
		// never fails one.
		if !event.ValidBy(a.user) {
			return nil, 0, fmt.Errorf("USER %.40q cannot name who makes this change: the gateway records it (X-Admin-User) "+
				"only as 1-%d printable characters; run with USER set to a shorter name", a.user, event.MaxBy)
		}
		req.Header.Set("X-Admin-User", a.user)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("admin api: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("admin api: %w", err)
	}
	if resp.StatusCode >= 300 {
		ae := &apiError{Status: resp.StatusCode}
		_ = json.Unmarshal(b, ae)
		ae.Status = resp.StatusCode
		if resp.StatusCode == http.StatusNotFound && method == http.MethodGet {
			// Only the admin API's own "unknown-queue" says the queue does
			// not exist. Any other 404 is no admin API at that address —
			// the public listener of a gateway with USHER_ADMIN_ADDR, or
			// not a gateway — and "no such queue" would deny a queue
			// that exists.
			if strings.HasSuffix(ae.Type, "/unknown-queue") {
				return nil, resp.StatusCode, fmt.Errorf("%w: %w", errNotFound, ae)
			}
			return nil, resp.StatusCode, fmt.Errorf("no admin API at USHER_GATEWAY_URL %s (with USHER_ADMIN_ADDR the gateway serves it on that address only): %w", a.base, ae)
		}
		return nil, resp.StatusCode, ae
	}
	return b, resp.StatusCode, nil
}

// get returns a queue's configuration and the gateway's full view of it.
func (a *adminClient) get(ctx context.Context, q string) (catalog.Config, json.RawMessage, error) {
	b, _, err := a.do(ctx, http.MethodGet, "/v1/admin/queues/"+url.PathEscape(q), nil)
	if err != nil {
		return catalog.Config{}, nil, err
	}
	var cfg catalog.Config // the view's figures are not configuration
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, nil, fmt.Errorf("admin api: decode queue: %w", err)
	}
	return cfg, b, nil
}

// put replaces a queue's configuration and reports whether it was created.
func (a *adminClient) put(ctx context.Context, cfg catalog.Config) (bool, error) {
	body, err := json.Marshal(cfg)
	if err != nil {
		return false, err
	}
	_, status, err := a.do(ctx, http.MethodPut, "/v1/admin/queues/"+url.PathEscape(cfg.Name), body)
	return status == http.StatusCreated, err
}

// delete deletes a queue (a closed one nobody holds a slot in).
func (a *adminClient) delete(ctx context.Context, q string) error {
	_, _, err := a.do(ctx, http.MethodDelete, "/v1/admin/queues/"+url.PathEscape(q), nil)
	return err
}

// queueRow is one queue of the list answer.
type queueRow struct {
	catalog.Config
	Waiting         int64   `json:"waiting"`
	Active          int64   `json:"active"`
	AdmittedTotal   int64   `json:"admittedTotal"`
	AdmitRatePerSec float64 `json:"admitRatePerSec"`
	Stock           *struct {
		State    string `json:"state"`
		Sellable int64  `json:"sellable"`
	} `json:"stock"`
	AdaptiveLimit *struct {
		Limit int `json:"limit"`
	} `json:"adaptiveLimit"`
}

// target is the row's targetActive: the adaptive limit in effect, marked
// so, for an adaptive queue.
func (r queueRow) target() string {
	if r.AdaptiveLimit == nil {
		return strconv.Itoa(r.TargetActive)
	}
	return strconv.Itoa(r.AdaptiveLimit.Limit) + " adaptive"
}

// stock is the row's stock state and sellable units, or "-".
func (r queueRow) stock() string {
	if r.Stock == nil {
		return "-"
	}
	return fmt.Sprintf("%s(%d)", r.Stock.State, r.Stock.Sellable)
}

func (a *adminClient) list(ctx context.Context) ([]queueRow, json.RawMessage, error) {
	b, _, err := a.do(ctx, http.MethodGet, "/v1/admin/queues", nil)
	if err != nil {
		return nil, nil, err
	}
	var out struct {
		Queues []queueRow `json:"queues"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, nil, fmt.Errorf("admin api: decode list: %w", err)
	}
	return out.Queues, b, nil
}

const queueSynopsis = `usherctl queue create|set|get|list|pause|resume|close|delete [flags] [QUEUE]

  create QUEUE   create a queue from the defaults and the flags given (fails if it exists)
  set QUEUE      change the flags given, keep the rest (GET, change, PUT)
  get QUEUE      print the queue's configuration and live figures as JSON
  list           print every queue (a table, or JSON with --json)
  pause QUEUE    keep accepting joins, admit nobody
  resume QUEUE   admit again
  close QUEUE    refuse joins; waiting shoppers are told CLOSED
  delete QUEUE   delete a closed queue nobody holds a slot in; its name is not used again

Changes are sent with X-Admin-User: $USER, which the config-change audit
records (1-128 printable characters; another USER fails a change before it
is sent). set, pause, resume and close read the current configuration and
write it back changed: the API replaces a configuration as a whole.`

// configFlags are the settable fields; only the flags given are applied.
type configFlags struct {
	targetActive, maxPerTick, tickMs int
	tokenTTL                         time.Duration
	state                            string
	adaptive                         string // on | off
	adaptiveMin, adaptiveMax         int
}

func (f *configFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.targetActive, "target-active", 0, "shoppers holding a slot at once (create/set)")
	fs.IntVar(&f.maxPerTick, "max-admit-per-tick", 0, "admissions per tick at most, 0 = no cap (create/set)")
	fs.IntVar(&f.tickMs, "tick-ms", 0, "admission tick in milliseconds (create/set)")
	fs.DurationVar(&f.tokenTTL, "token-ttl", 0, "entry token lifetime, e.g. 300s or 5m (create/set)")
	fs.StringVar(&f.state, "state", "", "open, paused or closed (create/set)")
	fs.StringVar(&f.adaptive, "adaptive", "", "on: find targetActive by measuring the order path, within --adaptive-min..--adaptive-max; off: the fixed targetActive (create/set)")
	fs.IntVar(&f.adaptiveMin, "adaptive-min", 0, "the adaptive limit's floor (create/set)")
	fs.IntVar(&f.adaptiveMax, "adaptive-max", 0, "the adaptive limit's ceiling (create/set)")
}

// apply changes cfg by the flags that were set on the command line.
func (f *configFlags) apply(fs *flag.FlagSet, cfg *catalog.Config) {
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "target-active":
			cfg.TargetActive = f.targetActive
		case "max-admit-per-tick":
			cfg.MaxAdmitPerTick = f.maxPerTick
		case "tick-ms":
			cfg.TickMs = f.tickMs
		case "token-ttl":
			cfg.TokenTTLSeconds = int(f.tokenTTL / time.Second)
		case "state":
			cfg.State = f.state
		case "adaptive", "adaptive-min", "adaptive-max":
			a := catalog.Adaptive{}
			if cfg.Adaptive != nil {
				a = *cfg.Adaptive
			}
			switch fl.Name {
			case "adaptive":
				a.Enabled = f.adaptive == "on"
			case "adaptive-min":
				a.Min = f.adaptiveMin
			default:
				a.Max = f.adaptiveMax
			}
			cfg.Adaptive = &a
		}
	})
}

// flagOf names the flag that sets a configuration's field, and whether it
// is that field's only flag ("" for a field no flag sets).
func flagOf(field string) (name string, only bool) {
	switch field {
	case "targetActive":
		return "target-active", true
	case "maxAdmitPerTick":
		return "max-admit-per-tick", true
	case "tickMs":
		return "tick-ms", true
	case "tokenTtlSeconds":
		return "token-ttl", true
	case "state":
		return "state", true
	case "adaptive":
		return "adaptive, --adaptive-min, --adaptive-max", false
	}
	return "", false
}

// check is a usage error listing what the flags given make invalid in
// base, by the rules the gateway applies (catalog.Config.Validate): the
// problems base has with the flags applied that it did not have before.
// With skipAdaptive the adaptive limit's bounds are left out.
func (f *configFlags) check(fs *flag.FlagSet, verb string, base catalog.Config, skipAdaptive bool) error {
	had := map[catalog.FieldError]bool{}
	for _, e := range base.Validate() {
		had[e] = true
	}
	changed := base
	f.apply(fs, &changed)
	var bad []string
	for _, e := range changed.Validate() {
		if had[e] || (skipAdaptive && strings.HasPrefix(e.Name, "adaptive")) {
			continue
		}
		what := e.Name + " " + e.Reason
		switch fl, only := flagOf(e.Name); {
		case only:
			what = fmt.Sprintf("--%s %s: %s", fl, fs.Lookup(fl).Value, what)
		case fl != "":
			what = fmt.Sprintf("--%s: %s", fl, what)
		}
		bad = append(bad, what)
	}
	if len(bad) > 0 {
		return usagef("queue %s: %s", verb, strings.Join(bad, "; "))
	}
	return nil
}

func (c *cli) queue(ctx context.Context, args []string) error {
	fs := newFlags("queue", queueSynopsis)
	var cf configFlags
	cf.register(fs)
	name := fs.String("queue", "", "the queue (or give it as the argument)")
	asJSON := fs.Bool("json", false, "list: print JSON instead of a table")
	pos, err := c.parse(fs, args)
	if err != nil {
		return done(err)
	}
	verb, err := queueVerb(fs, pos, name)
	if err != nil {
		return err
	}
	if err := cf.checkFor(fs, verb, *name); err != nil {
		return err
	}
	s, err := c.settings()
	if err != nil {
		return err
	}
	api := &adminClient{base: strings.TrimRight(s.gatewayURL, "/"), token: s.adminToken, user: s.adminUser,
		hc: &http.Client{Timeout: 10 * time.Second}}
	switch verb {
	case "list":
		return c.listQueues(ctx, api, *asJSON)
	case "get":
		_, raw, err := api.get(ctx, *name)
		if err != nil {
			return err
		}
		return printJSON(c.stdout, raw)
	case "delete":
		if err := api.delete(ctx, *name); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "queue %s deleted; its events stay in the streams, and its name is not used again\n", *name)
		return nil
	case "create":
		return c.createQueue(ctx, api, fs, &cf, *name)
	default:
		return c.changeQueue(ctx, api, fs, &cf, verb, *name)
	}
}

// queueVerb reads the verb and, unless --queue named it, the queue from
// the positional arguments, and checks the verb has the queue it needs.
func queueVerb(fs *flag.FlagSet, pos []string, name *string) (string, error) {
	if len(pos) == 0 {
		fs.Usage()
		return "", usagef("queue: want a verb: create, set, get, list, pause, resume, close or delete")
	}
	verb := pos[0]
	if len(pos) > 1 && *name == "" {
		*name = pos[1]
	}
	if len(pos) > 2 {
		return "", usagef("queue %s: unexpected arguments %q", verb, pos[2:])
	}
	switch verb {
	case "list":
		if *name != "" {
			return "", usagef("queue list takes no queue")
		}
	case "create", "set", "get", "pause", "resume", "close", "delete":
		if *name == "" {
			return "", usagef("queue %s: want a queue name", verb)
		}
		if !catalog.ValidName(*name) {
			return "", usagef("queue %s: %q is not a queue name (1-64 of A-Z a-z 0-9 _ -)", verb, *name)
		}
	default:
		return "", usagef("queue: unknown verb %q (want create, set, get, list, pause, resume, close or delete)", verb)
	}
	return verb, nil
}

// checkFor checks the configuration flags given with verb on queue q:
// only create and set take them, set at least one.
func (f *configFlags) checkFor(fs *flag.FlagSet, verb, q string) error {
	changes := 0
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "queue", "json":
		default:
			changes++
		}
	})
	if changes > 0 && verb != "create" && verb != "set" {
		return usagef("queue %s takes no configuration flags", verb)
	}
	if f.adaptive != "" && f.adaptive != "on" && f.adaptive != "off" {
		return usagef("queue %s: --adaptive %q: want on or off", verb, f.adaptive)
	}
	if f.tokenTTL%time.Second != 0 {
		return usagef("queue %s: --token-ttl %v: want whole seconds", verb, f.tokenTTL)
	}
	if verb == "set" && changes == 0 {
		return usagef("queue set: give at least one of --target-active, --max-admit-per-tick, --tick-ms, --token-ttl, --state, --adaptive, --adaptive-min, --adaptive-max")
	}
	// A value out of range is a bad command line, found before the gateway
	// is asked. create changes the defaults; set changes a configuration
	// only the gateway knows, so the adaptive bounds, which depend on it,
	// are checked once it is read.
	return f.check(fs, verb, catalog.Defaults(q), verb == "set")
}

// listQueues prints every queue the gateway knows, as a table or JSON.
func (c *cli) listQueues(ctx context.Context, api *adminClient, asJSON bool) error {
	rows, raw, err := api.list(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(c.stdout, raw)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSTATE\tTARGET\tMAX/TICK\tTICK\tTTL\tWAITING\tACTIVE\tADMITTED\tRATE/S\tSTOCK")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%dms\t%ds\t%d\t%d\t%d\t%.1f\t%s\n", r.Name, r.State, r.target(),
			r.MaxAdmitPerTick, r.TickMs, r.TokenTTLSeconds, r.Waiting, r.Active, r.AdmittedTotal, r.AdmitRatePerSec, r.stock())
	}
	return tw.Flush()
}

// createQueue stores queue q with the defaults and the flags given; a
// queue that exists is changed with set, not created again.
func (c *cli) createQueue(ctx context.Context, api *adminClient, fs *flag.FlagSet, cf *configFlags, q string) error {
	if _, _, err := api.get(ctx, q); err == nil {
		return fmt.Errorf("queue %s exists; change it with usherctl queue set", q)
	} else if !errors.Is(err, errNotFound) {
		return err
	}
	cfg := catalog.Defaults(q)
	cf.apply(fs, &cfg)
	return c.putAndShow(ctx, api, cfg)
}

// changeQueue reads queue q's configuration, changes it as verb (set,
// pause, resume or close) says, and stores it.
func (c *cli) changeQueue(ctx context.Context, api *adminClient, fs *flag.FlagSet, cf *configFlags, verb, q string) error {
	cfg, _, err := api.get(ctx, q)
	if err != nil {
		return err
	}
	switch verb {
	case "set":
		if err := cf.check(fs, verb, cfg, false); err != nil {
			return err
		}
		cf.apply(fs, &cfg)
	case "pause":
		cfg.State = catalog.StatePaused
	case "resume":
		cfg.State = catalog.StateOpen
	case "close":
		cfg.State = catalog.StateClosed
	}
	if cfg.State != catalog.StateClosed {
		// Why the queue closed is over once it is not closed (as the ops
		// dashboard's buttons do): a reason kept through a resume made a
		// later close say sold_out to shoppers, and a restock reopen it.
		cfg.ClosedReason = ""
	}
	return c.putAndShow(ctx, api, cfg)
}

func (c *cli) putAndShow(ctx context.Context, api *adminClient, cfg catalog.Config) error {
	created, err := api.put(ctx, cfg)
	if err != nil {
		return err
	}
	verb := "updated"
	if created {
		verb = "created"
	}
	fmt.Fprintf(c.stdout, "queue %s %s: state=%s targetActive=%d maxAdmitPerTick=%d tickMs=%d tokenTtlSeconds=%d",
		cfg.Name, verb, cfg.State, cfg.TargetActive, cfg.MaxAdmitPerTick, cfg.TickMs, cfg.TokenTTLSeconds)
	if cfg.AdaptiveOn() {
		fmt.Fprintf(c.stdout, " adaptive=%d..%d", cfg.Adaptive.Min, cfg.Adaptive.Max)
	}
	fmt.Fprintln(c.stdout)
	return nil
}

func printJSON(w io.Writer, raw []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		b.Reset()
		b.Write(raw)
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// itoa is strconv.FormatUint for sequences.
func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
