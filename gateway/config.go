package main

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"usher/gateway/gate"
	"usher/gateway/lineapi"
	"usher/gateway/page"
	"usher/internal/config"
	"usher/internal/event"
	"usher/internal/service"
	"usher/internal/shopper"
	"usher/internal/waitqueue/admission"
)

type settings struct {
	service.Settings
	addr        string
	adminAddr   string // the admin API's own listener; empty: the public one
	databaseURL string
	// redisPipelines: batched script calls in flight at once. Two makes
	// fewer, larger batches than four (each script's calls on one queue
	// go as one command, package script), while one slow Redis node's
	// batch does not hold every call as it would with one: BENCHMARKS.md,
	// "Why the defaults are what they are".
	redisPipelines int
	adminToken     string
	keyFiles       shopper.KeyFiles
	powSecret      string // proof of work at the door: challenges and shadow tickets
	notifierURL    string
	pageCSS        string
	pageLangs      *page.Langs // the shipped languages and USHER_PAGE_LANG_DIR's
	protect        protectSettings
	orderHold      time.Duration
	joins          lineapi.Grouping // group commit of a queue's concurrent joins
	maxConns       int              // the most connections the public listener holds; past it, 503
	joinsInFlight  int              // the most joins answered at once; past it, 503
	joinLatency    time.Duration    // lower that bound while joins take longer (0: never)
	readyWait      time.Duration    // how long a join admitted at once may wait for it
	gate           gate.Config      // the proxy gate's rules; none: off
	gateKeyFile    string           // the pass cookies' HMAC keys
	gateRecheck    time.Duration    // how long a pass's check is trusted
}

// loadSettings reads the gateway's environment; every problem is reported
// at once.
func loadSettings(env *config.Env) (settings, error) {
	data := env.String("USHER_DATA_DIR", ".usher")
	s := settings{
		Settings:       service.Load(env, 32),
		addr:           env.Addr("USHER_GATEWAY_ADDR", "127.0.0.1:8080"),
		adminAddr:      env.Addr("USHER_ADMIN_ADDR", ""),
		redisPipelines: env.Int("USHER_REDIS_PIPELINES", 2, 1),
		databaseURL:    env.String("USHER_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/usher?sslmode=disable"),
		adminToken:     env.String("USHER_ADMIN_TOKEN", devAdminToken),
		keyFiles:       shopper.LoadKeyFiles(env, data),
		powSecret:      env.String("USHER_CHALLENGE_SECRET_FILE", filepath.Join(data, "challenge.secret")),
		notifierURL:    notifierPublicURL(env),
		pageCSS:        pageCSSURL(env),
		protect:        loadProtectSettings(env),
		orderHold:      env.Duration("USHER_ORDER_HOLD", 6*time.Minute+30*time.Second),
		joins:          joinGrouping(env),
		maxConns:       env.Int("USHER_GATEWAY_MAX_CONNS", 10000, 0),
		joinsInFlight:  env.Int("USHER_JOINS_IN_FLIGHT", 512, 0),
		joinLatency:    joinLatencyTarget(env),
		readyWait:      joinReadyWait(env),
		gate:           gateRules(env),
		gateKeyFile:    env.String("USHER_GATE_KEY_FILE", filepath.Join(data, "gate.key")),
		gateRecheck:    gateRecheck(env),
	}
	env.Check(s.unsafe()) // refused where others can connect: see safedefaults.go
	// The page's languages: every catalog is checked now, so a shop's
	// incomplete one stops the start, naming what it lacks.
	var langs fs.FS
	dir := env.String("USHER_PAGE_LANG_DIR", "")
	if dir != "" {
		langs = os.DirFS(dir)
	}
	var err error
	if s.pageLangs, err = page.LoadLangs(langs); err != nil {
		env.Check(fmt.Errorf("USHER_PAGE_LANG_DIR=%s: %w", dir, err))
	}
	return s, env.Err()
}

// notifierPublicURL reads USHER_NOTIFIER_PUBLIC_URL, the notifier's public
// base URL that every join and poll answer's events URL starts with: an
// http(s) URL with a host and, behind a proxy that routes by path, a path
// prefix. A value without a scheme ("notifier:8081") or with a query would
// make every events URL one no browser can open, so it stops the start; a
// trailing slash is dropped (the events path brings its own).
func notifierPublicURL(env *config.Env) string {
	raw := env.String("USHER_NOTIFIER_PUBLIC_URL", "")
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		env.Check(fmt.Errorf("USHER_NOTIFIER_PUBLIC_URL=%q: want the notifier's public URL, http(s)://host[:port][/path], such as https://events.shop.example", raw))
		return ""
	}
	return strings.TrimRight(raw, "/")
}

// pageCSSURL reads USHER_PAGE_CSS_URL, the shop's stylesheet that every
// waiting-room page links after its own (<link rel=stylesheet href>): an
// http(s) URL with a host, or a path from the root of the page's own
// origin ("/brand.css", served by the shop's proxy in front of the
// gateway). Anything else would reach the shopper's browser as a link to
// nothing — a bare "shop.example/brand.css" is a path under /q/, another
// scheme is no stylesheet — and leave the page unstyled with no error
// anywhere, and credentials in it would be shown to every shopper; so it
// stops the start.
func pageCSSURL(env *config.Env) string {
	raw := env.String("USHER_PAGE_CSS_URL", "")
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	absolute := err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil
	rooted := err == nil && u.Scheme == "" && u.Host == "" && strings.HasPrefix(raw, "/") &&
		!strings.HasPrefix(raw, "//") && !strings.HasPrefix(raw, "/\\") // a browser reads both as another host
	if !absolute && !rooted {
		env.Check(fmt.Errorf("USHER_PAGE_CSS_URL=%q: want the stylesheet's http(s)://host[:port]/path (no credentials), or a /path on the page's own origin, such as https://shop.example/brand.css", raw))
		return ""
	}
	return raw
}

// gateRules reads USHER_GATE_FILE, the proxy gate's rules (package
// gate): checked now, so a bad file stops the start naming every problem.
// Unset, the gate is off.
func gateRules(env *config.Env) gate.Config {
	path := env.String("USHER_GATE_FILE", "")
	if path == "" {
		return gate.Config{}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		env.Check(fmt.Errorf("USHER_GATE_FILE=%s: %w", path, err))
		return gate.Config{}
	}
	cfg, err := gate.Parse(b, os.ReadFile)
	if err != nil {
		env.Check(fmt.Errorf("USHER_GATE_FILE=%s: %w", path, err))
		return gate.Config{}
	}
	return cfg
}

// maxJoinLinger bounds USHER_JOIN_LINGER: the linger is what a lone
// shopper's join waits on top of its own work.
const maxJoinLinger = time.Second

// joinGrouping reads how the gateway gathers a queue's concurrent joins
// into one record (group commit): USHER_JOIN_GROUPS, on (the default) or
// off (every join its own usher.joined.v1 message); USHER_JOIN_LINGER, how
// long the first join of a group waits for others (0, the default: none,
// a group goes as soon as the queue has none being recorded); and
// USHER_JOIN_BATCH, the most joins one usher.joins.v2 message lists (256:
// one group is recorded at a time per queue, so while a publish is slow —
// a broker short of CPU under overload — the joins a gateway records a
// second are this many per round trip, and a smaller cap queued them
// behind each other for most of a second). The instance id that names the
// groups' messages is drawn at every start.
//
// off is for upgrades from a release whose gateways write only
// usher.joined.v1: a queue's places count in groups from its first
// usher.joins.v2 message, and a v1 join stored after it by a gateway that
// does not group is placed by the follower where that gateway's answer did
// not put it (docs/events.md, "Places"). Every gateway of a queue groups,
// or none.
func joinGrouping(env *config.Env) lineapi.Grouping {
	g := lineapi.Grouping{Instance: lineapi.NewInstance()}
	switch v := env.String("USHER_JOIN_GROUPS", "on"); v {
	case "on":
	case "off":
		g.Off = true
	default:
		env.Check(fmt.Errorf("USHER_JOIN_GROUPS=%q: want on or off", v))
	}
	if v := env.String("USHER_JOIN_LINGER", ""); v != "" && v != "0" {
		g.Linger = env.Duration("USHER_JOIN_LINGER", 0)
	}
	if g.Linger > maxJoinLinger || g.Linger < 0 {
		env.Check(fmt.Errorf("USHER_JOIN_LINGER=%s: want 0 to %s", g.Linger, maxJoinLinger))
	}
	g.Size = env.Int("USHER_JOIN_BATCH", 256, 1)
	if g.Size > event.MaxJoins {
		env.Check(fmt.Errorf("USHER_JOIN_BATCH=%d: want at most %d, the joins one message may list", g.Size, event.MaxJoins))
	}
	g.Backlog = lineapi.DefaultBacklog(g.Size)
	return g
}

// maxReadyWait bounds USHER_JOIN_READY_WAIT: a join waiting for its
// admission holds a place among the joins in flight, and past a few
// seconds a shopper is better told WAITING and pushed READY.
const maxReadyWait = 10 * time.Second

// joinReadyWait reads USHER_JOIN_READY_WAIT, how long a join that can be
// admitted at once (a passthrough queue's, or one into an empty line with
// a slot free) waits for the admitter's follower and a current line before
// it is answered WAITING, for the next tick to admit.
func joinReadyWait(env *config.Env) time.Duration {
	d := env.Duration("USHER_JOIN_READY_WAIT", admission.AtOnceWait)
	if d > maxReadyWait {
		env.Check(fmt.Errorf("USHER_JOIN_READY_WAIT=%s: want at most %s", d, maxReadyWait))
	}
	return d
}

// durationOrOff reads the duration name (def when unset), where "0"
// turns off what it times; config.Env.Duration alone takes positive ones.
func durationOrOff(env *config.Env, name string, def time.Duration) time.Duration {
	if env.String(name, "") == "0" {
		return 0
	}
	return env.Duration(name, def)
}

// joinLatencyTarget is USHER_JOIN_LATENCY_TARGET: 250 ms by default, 0 to
// keep the bound on joins in flight fixed. A join's answer waits for the
// stream's ack and the line's script, a few milliseconds when the stack
// keeps up, so a tenth of joins past a quarter second means it does not.
func joinLatencyTarget(env *config.Env) time.Duration {
	return durationOrOff(env, "USHER_JOIN_LATENCY_TARGET", 250*time.Millisecond)
}

// gateRecheck reads USHER_GATE_RECHECK: how long the gate trusts the line's
// word that a pass's admission holds its slot (gate.DefaultRecheck; 0:
// ask on every request). At most 5 s: a freed slot's pass must not outlive
// it by more than a moment, and a pass's use is recorded no more rarely
// (the shortest passIdle is 10 s).
func gateRecheck(env *config.Env) time.Duration {
	d := durationOrOff(env, "USHER_GATE_RECHECK", gate.DefaultRecheck)
	if d > 5*time.Second {
		env.Check(fmt.Errorf("USHER_GATE_RECHECK=%s: want 0 to 5s", d))
	}
	return d
}
