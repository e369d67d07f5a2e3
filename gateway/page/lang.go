package page

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// The waiting-room page's languages. Every string the page shows — the
// server-rendered HTML and what page.js writes — comes from a message
// catalog: a flat JSON object of key → text, one file per language named
// by its BCP 47 tag (web/i18n/de.json). Placeholders are {name}. English
// is the reference: every catalog must have exactly its keys, with the
// same placeholders in each text, or the gateway refuses to start.
//
// A shop adds a language by dropping <tag>.json into USHER_PAGE_LANG_DIR;
// a file there for a language usher ships overrides those of its texts it
// names (a German shop that prefers "Sie" to "du" names just those).
//
// format.dateTime and format.time are Go time layouts (the reference time
// is Mon Jan 2 15:04:05 MST 2006) for the page without JavaScript, which
// shows times in UTC; with JavaScript the browser's Intl formats them in
// the shopper's own time zone.

//go:embed web/i18n/*.json
var i18nFiles embed.FS

// defaultLang is the reference catalog and the fallback.
const defaultLang = "en"

// Lang is one language of the page.
type Lang struct {
	tag     language.Tag
	code    string            // <html lang>: the file's tag, canonical
	msgs    map[string]string // every key of English
	printer *message.Printer  // numbers
}

// Langs are the page's languages; the first is English.
type Langs struct {
	list    []*Lang
	matcher language.Matcher
}

// LoadLangs reads the embedded catalogs, and those in dir (nil: none),
// and checks every one against English. The error names each file and
// each missing, unknown or malformed key.
func LoadLangs(dir fs.FS) (*Langs, error) {
	shipped, err := readCatalogs(i18nFiles, "web/i18n")
	if err != nil {
		return nil, err
	}
	en, ok := shipped[defaultLang]
	if !ok {
		return nil, errors.New("page languages: the English catalog is missing")
	}
	ref := en.msgs
	var errs []error
	var extra map[string]catalogFile
	if dir != nil {
		// Every problem of every file at once: read on after a bad one.
		if extra, err = readCatalogs(dir, "."); err != nil {
			errs = append(errs, err)
		}
	}
	merged := map[string]catalogFile{}
	for code, f := range shipped {
		if err := checkCatalog(ref, f, false); err != nil {
			errs = append(errs, err)
		}
		merged[code] = f
	}
	for code, f := range extra {
		base, ok := merged[code]
		if err := checkCatalog(ref, f, ok); err != nil {
			errs = append(errs, err)
			continue
		}
		if ok { // an override: the shop's texts over ours
			msgs := maps.Clone(base.msgs)
			for k, v := range f.msgs {
				msgs[k] = v
			}
			f.msgs = msgs
		}
		merged[code] = f
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	codes := make([]string, 0, len(merged))
	for code := range merged {
		if code != defaultLang {
			codes = append(codes, code)
		}
	}
	slices.Sort(codes)
	codes = append([]string{defaultLang}, codes...)
	p := &Langs{}
	tags := make([]language.Tag, 0, len(codes))
	for _, code := range codes {
		f := merged[code]
		p.list = append(p.list, &Lang{tag: f.tag, code: code, msgs: f.msgs, printer: message.NewPrinter(f.tag)})
		tags = append(tags, f.tag)
	}
	p.matcher = language.NewMatcher(tags)
	return p, nil
}

// catalogFile is one catalog as read.
type catalogFile struct {
	name string // for errors
	tag  language.Tag
	msgs map[string]string
}

// readCatalogs reads every *.json in dir of fsys, keyed by canonical tag.
func readCatalogs(fsys fs.FS, dir string) (map[string]catalogFile, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	out := map[string]catalogFile{}
	var errs []error
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".json")
		if e.IsDir() || !ok {
			continue
		}
		name := path.Join(dir, e.Name())
		tag, err := language.Parse(base)
		if err != nil || base == "" {
			errs = append(errs, fmt.Errorf("page language %s: the file name must be a language tag such as de.json or pt-BR.json", name))
			continue
		}
		code := tag.String()
		if prev, dup := out[code]; dup {
			errs = append(errs, fmt.Errorf("page language %s: %s is the same language", name, prev.name))
			continue
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var msgs map[string]string
		if err := json.Unmarshal(b, &msgs); err != nil {
			errs = append(errs, fmt.Errorf("page language %s: want a JSON object of key → text: %w", name, err))
			continue
		}
		out[code] = catalogFile{name: name, tag: tag, msgs: msgs}
	}
	return out, errors.Join(errs...)
}

// checkCatalog holds f to the English keys ref: all of them (or, for an
// override of a shipped language, some of them), no others, none empty,
// and each with the placeholders its English text has.
func checkCatalog(ref map[string]string, f catalogFile, override bool) error {
	var missing, unknown, empty, holes []string
	for k := range ref {
		if _, ok := f.msgs[k]; !ok && !override {
			missing = append(missing, k)
		}
	}
	for k, v := range f.msgs {
		en, ok := ref[k]
		switch {
		case !ok:
			unknown = append(unknown, k)
		case strings.TrimSpace(v) == "":
			empty = append(empty, k)
		case !slices.Equal(placeholders(en), placeholders(v)):
			holes = append(holes, fmt.Sprintf("%s (want %s, has %s)", k, braces(placeholders(en)), braces(placeholders(v))))
		}
	}
	var errs []error
	for _, p := range []struct {
		what string
		keys []string
	}{{"missing keys", missing}, {"unknown keys", unknown}, {"empty texts", empty}, {"wrong placeholders", holes}} {
		if len(p.keys) > 0 {
			slices.Sort(p.keys)
			errs = append(errs, fmt.Errorf("page language %s: %s: %s", f.name, p.what, strings.Join(p.keys, ", ")))
		}
	}
	return errors.Join(errs...)
}

// placeholders lists the distinct {name}s of s, sorted.
func placeholders(s string) []string {
	var out []string
	for {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			break
		}
		if name := s[i+1 : i+j]; validPlaceholder(name) && !slices.Contains(out, name) {
			out = append(out, name)
		}
		s = s[i+1:]
	}
	slices.Sort(out)
	return out
}

func validPlaceholder(name string) bool {
	if name == "" || len(name) > 32 {
		return false
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

func braces(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return "{" + strings.Join(names, "} {") + "}"
}

// maxLangInput bounds what negotiation reads of ?lang= and
// Accept-Language: a browser sends a few dozen characters.
const maxLangInput = 512

// negotiate picks the page's language: ?lang= when it names one the page
// has (de, de-AT, ja-JP…), else the best of Accept-Language by q-value, else
// English.
func (p *Langs) negotiate(query, acceptLanguage string) *Lang {
	for _, s := range []string{query, acceptLanguage} {
		if s == "" || len(s) > maxLangInput {
			continue
		}
		desired, _, err := language.ParseAcceptLanguage(s)
		if err != nil || len(desired) == 0 {
			continue
		}
		if _, i, conf := p.matcher.Match(desired...); conf != language.No && i >= 0 && i < len(p.list) {
			return p.list[i]
		}
	}
	return p.list[0]
}

// ByCode is the language with this exact code, or nil.
func (p *Langs) ByCode(code string) *Lang {
	for _, l := range p.list {
		if l.code == code {
			return l
		}
	}
	return nil
}

// T is the text of key with each {name} of kv (name, value, name, value…)
// replaced; a key the catalog lacks (it cannot: see checkCatalog) is
// returned as it is.
func (l *Lang) T(key string, kv ...string) string {
	s, ok := l.msgs[key]
	if !ok {
		return key
	}
	if len(kv) == 0 || !strings.Contains(s, "{") {
		return s
	}
	var b strings.Builder
	fill(s, func(text string) { b.WriteString(text) }, func(name string) bool {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == name {
				b.WriteString(kv[i+1])
				return true
			}
		}
		return false
	})
	return b.String()
}

// Code is the language's BCP 47 tag, as <html lang> has it.
func (l *Lang) Code() string { return l.code }

// All are the page's languages, English first.
func (p *Langs) All() []*Lang { return p.list }

// has reports whether the catalog has key.
func (l *Lang) has(key string) bool {
	_, ok := l.msgs[key]
	return ok
}

// HTML is T for text that carries markup in its placeholders: the text is
// escaped, the values (already HTML) are not.
func (l *Lang) HTML(key string, values map[string]template.HTML) template.HTML {
	var b strings.Builder
	fill(l.T(key), func(text string) { b.WriteString(template.HTMLEscapeString(text)) }, func(name string) bool {
		v, ok := values[name]
		if ok {
			b.WriteString(string(v))
		}
		return ok
	})
	return template.HTML(b.String())
}

// fill walks s, handing text to text and each {name} to value; a name
// value does not know is written as text.
func fill(s string, text func(string), value func(name string) bool) {
	for s != "" {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			text(s)
			return
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			text(s)
			return
		}
		text(s[:i])
		name := s[i+1 : i+j]
		if !validPlaceholder(name) || !value(name) {
			text(s[i : i+j+1])
		}
		s = s[i+j+1:]
	}
}

// number writes n as the language groups digits (1,234 · 1.234 · 1 234).
func (l *Lang) number(n int64) string {
	return l.printer.Sprintf("%d", n)
}

// duration writes s seconds as page.js does: 42 s, 3 min 05 s, 1 h 29 min.
func (l *Lang) duration(s int64) string {
	s = max(s, 0)
	if s < 60 {
		return l.T("duration.seconds", "s", strconv.FormatInt(s, 10))
	}
	m := s / 60
	if m < 60 {
		return l.T("duration.minutes", "m", strconv.FormatInt(m, 10), "ss", fmt.Sprintf("%02d", s%60))
	}
	return l.T("duration.hours", "h", strconv.FormatInt(m/60, 10), "mm", fmt.Sprintf("%02d", m%60))
}

// minutes writes d in whole minutes (rounded down: a shopper told when to
// come back is told early), or in seconds below one.
func (l *Lang) minutes(d time.Duration) string {
	s := int64(d / time.Second)
	if s < 60 {
		return l.duration(s)
	}
	return l.T("duration.minutesOnly", "m", strconv.FormatInt(s/60, 10))
}

// dateTime and clock write t in UTC with the catalog's layouts.
func (l *Lang) dateTime(t time.Time) string { return t.UTC().Format(l.T("format.dateTime")) }
func (l *Lang) clock(t time.Time) string    { return t.UTC().Format(l.T("format.time")) }

// problemKeys maps the problem types a shopper can meet to the catalog's
// texts for them (page.js gets the same map): anything else reads
// error.generic.
var problemKeys = map[string]string{
	"rate-limited":          "problem.busy",
	"unavailable":           "problem.unavailable",
	"token-unconfirmed":     "problem.unavailable",
	"not-ready":             "problem.unavailable",
	"internal":              "problem.unavailable",
	"maintenance":           "ended.MAINTENANCE.textStatic",
	"invalid-ticket":        "problem.ticket",
	"ticket-not-found":      "problem.ticket",
	"ticket-stale":          "problem.ticket",
	"invalid-user":          "problem.identity",
	"untrusted-user-header": "problem.identity",
	"invalid-user-token":    "problem.identity",
	"token-expired":         "problem.tokenExpired",
	"token-left":            "problem.tokenExpired",
	"invalid-token":         "problem.ticket",
	"token-not-ready":       "problem.tokenEarly",
	"token-not-yours":       "problem.notYours",
	"order-conflict":        "problem.used",
	"already-purchased":     "problem.limit",
	"no-products":           "ready.shopCheckout",
	"wrong-sku":             "problem.order",
	"too-many":              "problem.order",
	"invalid-body":          "problem.order",
	"challenge-required":    "join.needsScript",
	"queue-closed":          "ended.CLOSED.other",
	"queue-ended":           "ended.CLOSED.ended",
}

// problemText is what a shopper reads for a problem of type typ (the
// problem's URI or its last segment).
func (l *Lang) problemText(typ string) string {
	if i := strings.LastIndexByte(typ, '/'); i >= 0 {
		typ = typ[i+1:]
	}
	if k, ok := problemKeys[typ]; ok {
		return l.T(k)
	}
	return l.T("error.generic")
}

// pageScriptData is what page.js reads from the page: the language, its
// texts and the problem map.
type pageScriptData struct {
	Lang     string            `json:"lang"`
	Messages map[string]string `json:"messages"`
	Problems map[string]string `json:"problems"`
}

func (l *Lang) script() pageScriptData {
	return pageScriptData{Lang: l.code, Messages: l.msgs, Problems: problemKeys}
}
