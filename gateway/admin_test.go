package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"usher/gateway/admin"
)

// X-Admin-User is who made a change, recorded in its audit event on the
// ops stream: a name of 1-128 printable characters. Anything else is
// refused with 400 invalid-admin-user naming the header, and nothing
// changes or is recorded.
func TestAdminUserIsBounded(t *testing.T) {
	h := newHarness(t)
	db := migratedStore(t)
	h.gw.stock = admin.NewMigratedStock(db)
	h.rebuild()
	base := h.serve()
	send := func(method, path, body, by string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer secret-admin")
		if by != "" {
			req.Header.Set("X-Admin-User", by)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return res.StatusCode, raw
	}
	q := "/v1/admin/queues/" + h.queue
	longest := strings.Repeat("é", 128) // 128 characters, 256 bytes
	if code, raw := send("PUT", q, `{"targetActive": 7, "rateLimit": `+limitsOff+`}`, longest); code != 200 {
		t.Fatalf("PUT with a 128-character X-Admin-User = %d %s, want 200", code, raw)
	}
	if code, raw := send("PUT", q, `{"targetActive": 8, "rateLimit": `+limitsOff+`}`, ""); code != 200 {
		t.Fatalf("PUT without X-Admin-User = %d %s, want 200", code, raw)
	}

	// A browser's fetch() sends ISO-8859-1: "José" as J o s 0xE9.
	if code, raw := send("PUT", q, `{"targetActive": 8, "rateLimit": `+limitsOff+`}`, "Jos\xe9"); code != 200 {
		t.Fatalf("PUT with X-Admin-User José in ISO-8859-1 = %d %s, want 200", code, raw)
	}

	bad := map[string]string{
		"129 characters":     strings.Repeat("a", 129),
		"4 KiB":              strings.Repeat("x", 4096),
		"a tab":              "ops\talice",
		"a C1 control":       "ops-\x85",
		"a line separator":   "ops\u2028alice",
		"a zero-width space": "ops\u200balice",
	}
	routes := []struct{ method, path, body string }{
		{"PUT", q, `{"targetActive": 9, "rateLimit": ` + limitsOff + `}`},
		{"PUT", q + "/notice", `{"message": "Back at 10."}`},
		{"DELETE", q + "/notice", ""},
		{"DELETE", q, ""},
		{"POST", q + "/invites", `{"count": 1}`},
		{"PUT", "/v1/admin/stock/sku-1", `{"available": 5}`},
	}
	for name, by := range bad {
		for _, r := range routes {
			code, raw := send(r.method, r.path, r.body, by)
			var p struct {
				Type          string `json:"type"`
				InvalidParams []struct {
					Name string `json:"name"`
				} `json:"invalid-params"`
			}
			_ = json.Unmarshal(raw, &p)
			if code != 400 || p.Type != "https://usher.dev/problems/invalid-admin-user" ||
				len(p.InvalidParams) != 1 || p.InvalidParams[0].Name != "X-Admin-User" {
				t.Errorf("%s %s with X-Admin-User of %s = %d %s, want 400 invalid-admin-user naming X-Admin-User", r.method, r.path, name, code, raw)
			}
		}
	}
	// Reads record nothing: a GET is not refused for the header.
	if code, raw := send("GET", q, "", strings.Repeat("a", 129)); code != 200 {
		t.Errorf("GET with a 129-character X-Admin-User = %d %s, want 200", code, raw)
	}

	var by []string
	for _, c := range h.configEvents() {
		by = append(by, c.By)
	}
	// The harness's create, then the three accepted PUTs; nothing refused.
	if len(by) != 4 || by[1] != longest || by[2] != "admin" || by[3] != "José" {
		t.Errorf("audit events by %q, want [admin %s admin José]", by, longest)
	}
	if cfg, _ := h.gw.queues.Get(h.queue); cfg.TargetActive != 8 || cfg.Notice != nil {
		t.Errorf("queue = target %d, notice %v: want 8 and none (the refused changes changed nothing)", cfg.TargetActive, cfg.Notice)
	}
	if _, known, err := db.Stock(t.Context(), "sku-1"); err != nil || known {
		t.Errorf("stock of sku-1 known = %v, %v: want unset (the refused PUT set nothing)", known, err)
	}
}
