package page

import (
	"encoding/json"
	"html/template"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// Every shipped catalog has exactly English's keys, each text with the
// placeholders its English one has; the page's problem map and the keys
// the code builds at run time name texts that exist.
func TestShippedCatalogsAreComplete(t *testing.T) {
	langs, err := LoadLangs(nil)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, l := range langs.list {
		codes = append(codes, l.code)
	}
	if want := []string{"en", "de", "es", "fr", "ja"}; !slices.Equal(codes, want) {
		t.Fatalf("languages = %v, want %v (English first)", codes, want)
	}
	en := langs.list[0]
	for _, l := range langs.list {
		if len(l.msgs) != len(en.msgs) {
			t.Errorf("%s has %d texts, English %d", l.code, len(l.msgs), len(en.msgs))
		}
	}
	// Keys the Go code and page.js build from parts.
	var built []string
	for _, s := range []string{"EXPIRED", "USED", "LEFT", "CLOSED", "MAINTENANCE"} {
		built = append(built, "ended."+s+".title")
	}
	for _, s := range []string{"EXPIRED", "USED", "LEFT"} {
		built = append(built, "ended."+s+".text")
	}
	for _, s := range []string{"sold_out", "ended", "other"} {
		built = append(built, "ended.CLOSED."+s)
	}
	for _, s := range []string{"PENDING", "PAID", "FAILED", "REJECTED"} {
		built = append(built, "order.status."+s)
	}
	built = append(built, "notice.info", "notice.warning")
	for _, k := range problemKeys {
		built = append(built, k)
	}
	for _, k := range built {
		if !en.has(k) {
			t.Errorf("the code uses text %q, which the catalogs lack", k)
		}
	}
	// Every key page.js and the template ask for exists.
	seen := 0
	for _, file := range []string{"web/page.js", "web/page.html", "form.go", "page.go", "lang.go"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?:\bt\(|\.T\(?\s*)["']([a-zA-Z]+\.[A-Za-z_.]+)["']`).FindAllSubmatch(b, -1) {
			if k := string(m[1]); !en.has(k) && !strings.HasSuffix(k, ".") {
				t.Errorf("%s uses text %q, which the catalogs lack", file, k)
			}
			seen++
		}
	}
	if seen < 60 {
		t.Errorf("found %d uses of texts in the page's code, want more: is the pattern still right?", seen)
	}
}

// A shop's directory adds a language, overrides some texts of a shipped
// one, and cannot start with a catalog that misses keys, has unknown ones,
// or drops a placeholder: the error names each.
func TestShopLanguageFiles(t *testing.T) {
	en := shippedLangs().list[0].msgs
	full := func(change func(map[string]string)) *fstest.MapFile {
		m := map[string]string{}
		for k, v := range en {
			m[k] = "[pt] " + v
		}
		if change != nil {
			change(m)
		}
		b, _ := json.Marshal(m)
		return &fstest.MapFile{Data: b}
	}
	dir := fstest.MapFS{
		"pt-BR.json": full(nil),
		"de.json":    {Data: []byte(`{"ready.order": "Jetzt kaufen"}`)},
		"README.md":  {Data: []byte("not a catalog")},
	}
	langs, err := LoadLangs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if l := langs.negotiate("", "pt-BR,pt;q=0.9"); l.code != "pt-BR" || !strings.HasPrefix(l.T("ready.order"), "[pt] ") {
		t.Errorf("pt-BR: got %s %q", l.code, l.T("ready.order"))
	}
	de := langs.negotiate("de", "")
	if de.T("ready.order") != "Jetzt kaufen" || de.T("ready.heading") != "Du bist dran" {
		t.Errorf("de override: %q, %q", de.T("ready.order"), de.T("ready.heading"))
	}

	bad := fstest.MapFS{
		"it.json": full(func(m map[string]string) {
			delete(m, "ready.order")
			delete(m, "check.button")
			m["ready.ordr"] = "Ordina"
			m["ready.heldFor"] = "Posto tenuto."
			m["join.button"] = " "
		}),
		"de.json":      {Data: []byte(`{"page.title": "Warteraum"}`)},
		"x_y!.json":    {Data: []byte(`{}`)},
		"nl.json":      {Data: []byte(`{"a": 1}`)},
		"fr-fr.json":   full(nil),
		"fr-FR.json":   full(nil),
		"nested/a.txt": {Data: []byte("x")},
	}
	_, err = LoadLangs(bad)
	if err == nil {
		t.Fatal("loadPageLangs accepted broken catalogs")
	}
	for _, want := range []string{
		"it.json: missing keys: check.button, ready.order",
		"it.json: unknown keys: ready.ordr",
		"it.json: empty texts: join.button",
		"it.json: wrong placeholders: ready.heldFor (want {left}, has none)",
		"de.json: wrong placeholders: page.title (want {queue}, has none)",
		"x_y!.json: the file name must be a language tag",
		"nl.json: want a JSON object of key → text",
		"is the same language",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// Language negotiation: ?lang= first, then Accept-Language by q-value,
// then English.
func TestPageLanguageNegotiation(t *testing.T) {
	langs := shippedLangs()
	tests := []struct{ query, accept, want string }{
		{"", "", "en"},
		{"de", "", "de"},
		{"DE-at", "", "de"},
		{"ja", "fr", "ja"},
		{"xx", "es", "es"},    // an unknown ?lang= leaves it to the header
		{"klingon", "", "en"}, // not a tag at all
		{"", "ja", "ja"},
		{"", "fr-CA,fr;q=0.9,en;q=0.8", "fr"},
		{"", "en-US,en;q=0.9,de;q=0.8", "en"},
		{"", "de;q=0.5, es;q=0.9", "es"}, // by q-value, not by order
		{"", "ja;q=0, de", "de"},         // q=0: not acceptable
		{"", "zh-CN,zh;q=0.9", "en"},     // nothing the page has
		{"", "sv, es-419;q=0.3", "es"},   // the best it has, however low
		{"", "*", "en"},
		{"", "de;q=abc", "en"}, // malformed: ignored
		{"", strings.Repeat("de-", 400), "en"},
	}
	for _, tt := range tests {
		if got := langs.negotiate(tt.query, tt.accept).code; got != tt.want {
			t.Errorf("negotiate(?lang=%q, Accept-Language %q) = %s, want %s", tt.query, tt.accept, got, tt.want)
		}
	}
}

// The language's numbers, durations and times, as page.js writes them.
func TestPageLanguageFormats(t *testing.T) {
	langs := shippedLangs()
	at := time.Date(2026, 11, 29, 21, 29, 18, 0, time.FixedZone("CET", 3600))
	tests := []struct {
		lang, number, secs, mins, hours, date, clock string
	}{
		{"en", "12,345", "42 s", "3 min 05 s", "1 h 29 min", "Sun 29 Nov 2026, 20:29 UTC", "20:29:18 UTC"},
		{"de", "12.345", "42 s", "3 min 05 s", "1 Std. 29 min", "29.11.2026, 20:29 UTC", "20:29:18 UTC"},
		{"ja", "12,345", "42秒", "3分05秒", "1時間29分", "2026年11月29日 20:29 UTC", "20:29:18 UTC"},
	}
	for _, tt := range tests {
		l := langs.ByCode(tt.lang)
		got := []string{l.number(12345), l.duration(42), l.duration(185), l.duration(5340), l.dateTime(at), l.clock(at)}
		want := []string{tt.number, tt.secs, tt.mins, tt.hours, tt.date, tt.clock}
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", tt.lang, got, want)
		}
	}
	en := langs.ByCode("en")
	if got := en.T("order.answerReason", "id", "ord_1", "status", "x", "reason", "y"); got != "Order ord_1: x (y)" {
		t.Errorf("T = %q", got)
	}
	for d, want := range map[time.Duration]string{45 * time.Second: "45 s", 90 * time.Second: "1 min", 5 * time.Minute: "5 min"} {
		if got := en.minutes(d); got != want {
			t.Errorf("minutes(%v) = %q, want %q", d, got, want)
		}
	}
	if got := en.T("ready.heldFor"); got != "Your place is held for {left}." {
		t.Errorf("T without values = %q", got)
	}
	got := en.HTML("page.heading", map[string]template.HTML{"queue": `<b>q</b>`})
	if got != `You are in line for <b>q</b>` {
		t.Errorf("HTML = %q", got)
	}
}

// Negotiation never fails and always picks a language the page has,
// whatever a client sends.
func FuzzPageLanguage(f *testing.F) {
	langs := shippedLangs()
	for _, s := range []string{"", "de", "en-US,en;q=0.9", "ja;q=0", "*;q=0.5", "x-klingon", "de-u-co-phonebk", "zh-Hant-TW;q=0.8,,,", "en;q=1.0000001"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, query, accept string) {
		l := langs.negotiate(query, accept)
		if l == nil || langs.ByCode(l.code) != l {
			t.Fatalf("negotiate(%q, %q) = %v", query, accept, l)
		}
	})
}
