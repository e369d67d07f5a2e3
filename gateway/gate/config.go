package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"usher/internal/catalog"
)

// File is the gate's configuration (USHER_GATE_FILE), as JSON:
//
//	{"rules": [{"queue": "drop", "host": "shop.example", "paths": ["/products/", "/checkout/"],
//	  "bypass": {"paths": ["/static/"], "methods": ["OPTIONS"], "cidrs": ["10.0.0.0/8"],
//	             "header": "X-Partner-Key", "secretFile": "/run/secrets/partner"},
//	  "completePath": "/checkout/complete", "passIdle": "10m", "passTTL": "30m",
//	  "cookieDomain": "shop.example", "failMode": "closed",
//	  "waitingRoom": "https://queue.shop.example/q/drop", "returnHosts": ["shop.example"],
//	  "deny": "redirect"}],
//	 "insecureCookie": false}
type File struct {
	Rules []RuleFile `json:"rules"`
	// InsecureCookie leaves Secure off the pass cookie: for a shop served
	// over plain HTTP on loopback (tests, development) only.
	InsecureCookie bool `json:"insecureCookie,omitempty"`
}

// RuleFile is one rule of the file: a queue and the requests it protects.
type RuleFile struct {
	Queue string   `json:"queue"`
	Host  string   `json:"host,omitempty"`  // the original request's host; "" any
	Paths []string `json:"paths,omitempty"` // protected path prefixes; none: every path
	// Bypass names the requests never queued.
	Bypass       BypassFile `json:"bypass,omitempty"`
	CompletePath string     `json:"completePath,omitempty"`
	PassIdle     string     `json:"passIdle,omitempty"`
	PassTTL      string     `json:"passTTL,omitempty"`
	CookieDomain string     `json:"cookieDomain,omitempty"`
	FailMode     string     `json:"failMode,omitempty"`
	WaitingRoom  string     `json:"waitingRoom,omitempty"`
	ReturnHosts  []string   `json:"returnHosts,omitempty"`
	// Deny is how a navigation without a pass is turned away: redirect
	// (302, the default) or 401 (with Usher-Location, for nginx).
	Deny string `json:"deny,omitempty"`
}

// BypassFile names the requests a rule never queues.
type BypassFile struct {
	Paths   []string `json:"paths,omitempty"`
	Methods []string `json:"methods,omitempty"`
	CIDRs   []string `json:"cidrs,omitempty"`
	// Header is a partner's header; its value must equal the secret in
	// SecretFile.
	Header     string `json:"header,omitempty"`
	SecretFile string `json:"secretFile,omitempty"`
}

// Fail modes: what the gate answers when the line (Redis) cannot be read.
const (
	FailOpen   = "open"   // 200 with Usher-Gate: fail-open
	FailClosed = "closed" // 503 with Retry-After
)

// Deny modes of a navigation without a pass.
const (
	DenyRedirect = "redirect"
	Deny401      = "401"
)

// Defaults of a rule.
const (
	DefaultPassIdle = 10 * time.Minute
	DefaultPassTTL  = 30 * time.Minute
	// minPassIdle keeps the sweep's bound above the time between a pass's
	// uses that a page's assets alone take.
	minPassIdle = 10 * time.Second
)

// Rule is one checked rule of the file.
type Rule struct {
	Queue        string
	Host         string // lower case; "" any
	Paths        []string
	BypassPaths  []string
	Methods      map[string]bool // bypassed methods, upper case
	CIDRs        []netip.Prefix
	Header       string // the partner header's name; "" none
	secret       []byte
	CompletePath string
	PassIdle     time.Duration
	PassTTL      time.Duration
	CookieDomain string
	FailMode     string
	WaitingRoom  string // the waiting room's URL, before ?return=
	ReturnHosts  []string
	Deny         string
}

// Config is the gate's checked configuration.
type Config struct {
	Rules          []Rule
	InsecureCookie bool
}

// MaxFileSize bounds the gate file read.
const MaxFileSize = 1 << 20

// Parse reads and checks a gate file; readSecret reads a partner
// secret's file. Every problem is reported at once.
func Parse(data []byte, readSecret func(string) ([]byte, error)) (Config, error) {
	if len(data) > MaxFileSize {
		return Config{}, fmt.Errorf("larger than %d bytes", MaxFileSize)
	}
	var f File
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Config{}, fmt.Errorf("not a gate file: %w", err)
	}
	if dec.More() {
		return Config{}, errors.New("not a gate file: more than one JSON value")
	}
	if len(f.Rules) == 0 {
		return Config{}, errors.New("no rules")
	}
	cfg := Config{InsecureCookie: f.InsecureCookie}
	var errs []error
	for i, rf := range f.Rules {
		r, err := rf.check(readSecret)
		if err != nil {
			errs = append(errs, fmt.Errorf("rules[%d]: %w", i, err))
			continue
		}
		cfg.Rules = append(cfg.Rules, r)
	}
	return cfg, errors.Join(errs...)
}

// check is the rule of rf, or every reason it is not one.
func (rf RuleFile) check(readSecret func(string) ([]byte, error)) (Rule, error) {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	r := Rule{Queue: rf.Queue, Host: strings.ToLower(rf.Host), Paths: rf.Paths, BypassPaths: rf.Bypass.Paths,
		CompletePath: rf.CompletePath, CookieDomain: rf.CookieDomain, FailMode: rf.FailMode, Deny: rf.Deny,
		WaitingRoom: rf.WaitingRoom, Methods: map[string]bool{}, Header: rf.Bypass.Header}
	if !catalog.ValidName(r.Queue) {
		bad("queue %q: want a queue name (1-64 of A-Z a-z 0-9 _ -)", r.Queue)
	}
	if r.Host != "" && !validHost(r.Host) {
		bad("host %q: want a host name, such as shop.example", rf.Host)
	}
	if len(r.Paths) == 0 {
		r.Paths = []string{"/"}
	}
	for _, p := range append(append([]string{}, r.Paths...), r.BypassPaths...) {
		if !strings.HasPrefix(p, "/") {
			bad("path prefix %q: want one starting with /", p)
		}
	}
	if r.CompletePath != "" && !strings.HasPrefix(r.CompletePath, "/") {
		bad("completePath %q: want a path starting with /", r.CompletePath)
	}
	for _, m := range rf.Bypass.Methods {
		if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " \t/") {
			bad("bypass method %q: want an HTTP method in upper case, such as OPTIONS", m)
		}
		r.Methods[m] = true
	}
	for _, c := range rf.Bypass.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			bad("bypass cidr %q: want a CIDR such as 10.0.0.0/8", c)
			continue
		}
		r.CIDRs = append(r.CIDRs, p.Masked())
	}
	r.checkPartner(rf.Bypass.SecretFile, readSecret, bad)
	r.PassIdle = duration(rf.PassIdle, DefaultPassIdle, "passIdle", bad)
	r.PassTTL = duration(rf.PassTTL, DefaultPassTTL, "passTTL", bad)
	if r.PassIdle < minPassIdle || r.PassIdle > r.PassTTL {
		bad("passIdle %s: want at least %s and at most passTTL (%s)", r.PassIdle, minPassIdle, r.PassTTL)
	}
	if r.CookieDomain != "" && !validHost(strings.TrimPrefix(r.CookieDomain, ".")) {
		bad("cookieDomain %q: want a domain, such as shop.example", r.CookieDomain)
	}
	r.FailMode = oneOf(r.FailMode, FailClosed, "failMode", bad, FailOpen)
	r.Deny = oneOf(r.Deny, DenyRedirect, "deny", bad, Deny401)
	if r.WaitingRoom == "" {
		r.WaitingRoom = "/q/" + r.Queue
	} else if !validURL(r.WaitingRoom) {
		bad("waitingRoom %q: want an http(s) URL or a /path, without a query", r.WaitingRoom)
	}
	for _, h := range rf.ReturnHosts {
		if !validHost(strings.ToLower(h)) {
			bad("returnHosts %q: want a host name", h)
		}
		r.ReturnHosts = append(r.ReturnHosts, strings.ToLower(h))
	}
	if r.Host != "" {
		r.ReturnHosts = append(r.ReturnHosts, r.Host)
	}
	return r, errors.Join(errs...)
}

// checkPartner reads the partner header's secret: both or neither.
func (r *Rule) checkPartner(file string, readSecret func(string) ([]byte, error), bad func(string, ...any)) {
	switch {
	case r.Header == "" && file == "":
		return
	case r.Header == "" || file == "":
		bad("bypass: header and secretFile go together")
		return
	case !validHeaderName(r.Header):
		bad("bypass header %q: not a header name", r.Header)
		return
	}
	b, err := readSecret(file)
	if err != nil {
		bad("bypass secretFile: %v", err)
		return
	}
	r.secret = bytes.TrimSpace(b)
	if len(r.secret) < 16 {
		bad("bypass secretFile %s: want a secret of at least 16 characters", file)
	}
}

// duration parses a rule's duration field, def when it is empty.
func duration(s string, def time.Duration, name string, bad func(string, ...any)) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		bad("%s %q: want a duration such as 10m", name, s)
		return def
	}
	return d
}

// oneOf is s when it is def or one of others, def when it is empty.
func oneOf(s, def, name string, bad func(string, ...any), others ...string) string {
	if s == "" || s == def {
		return def
	}
	for _, o := range others {
		if s == o {
			return s
		}
	}
	bad("%s %q: want %s or %s", name, s, def, strings.Join(others, " or "))
	return def
}

// validHost reports whether h is a host name or address, without a port.
func validHost(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return true
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// validURL reports whether s is an http(s) URL with a host, or a path
// from the root (not //, which a browser reads as another host), with no
// query, fragment or credentials.
func validURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.ForceQuery {
		return false
	}
	if u.Scheme == "" && u.Host == "" {
		return strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "//") && !strings.HasPrefix(s, "/\\")
	}
	return (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func validHeaderName(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return h != ""
}
