package httpapi

import (
	"strings"
	"testing"
	"time"
)

// A body is read as the API document reads it: exact field names at every
// depth, nothing unknown, no null, nothing after the value.
func TestBodiesAreReadAsTheDocumentReadsThem(t *testing.T) {
	type inner struct {
		Mode string `json:"mode"`
	}
	type body struct {
		TickMs    int        `json:"tickMs"`
		Challenge inner      `json:"challenge"`
		List      []inner    `json:"list"`
		Ptr       *inner     `json:"ptr"`
		Skipped   string     `json:"-"`
		Plain     string     // encoding/json names it Plain
		At        *time.Time `json:"at"`
	}
	for _, tc := range []struct {
		in      string
		refused string // "" = accepted; else part of the error
	}{
		{`{"tickMs": 5, "challenge": {"mode": "log"}, "list": [{"mode": "x"}], "ptr": {"mode": "y"}, "Plain": "p"}`, ""},
		{`{"TickMs": 5}`, `"TickMs"`},
		{`{"tiCkMs": 5}`, `"tiCkMs"`},
		{`{"challenge": {"Mode": "log"}}`, `"challenge.Mode"`},
		{`{"list": [{"mode": "x"}, {"MODE": "x"}]}`, `"list.MODE"`},
		{`{"ptr": {"Mode": "y"}}`, `"ptr.Mode"`},
		{`{"plain": "p"}`, `"plain"`},
		{`{"Skipped": "s"}`, `unknown field`},
		{`{"other": 1}`, `unknown field`},
		{`{"tickMs": 5} {}`, `after the JSON value`},
		{`{"tickMs": "5"}`, `"tickMs" is a string, want an integer`},
		{`{"tickMs": 1.5}`, `"tickMs" is a number 1.5, want an integer`},
		// An integer is an integer however large: what is wrong with it is
		// its size, which "want an integer" did not say.
		{`{"tickMs": 99999999999999999999}`, `"tickMs" is 99999999999999999999, an integer out of range`},
		{`{"tickMs": -99999999999999999999}`, `"tickMs" is -99999999999999999999, an integer out of range`},
		{`{"challenge": {"mode": 1}}`, `"challenge.mode" is a number, want a string`},
		{`{"list": {}}`, `"list" is an object, want an array`},
		{`null`, `null`},
		{``, `the body is empty`},
		{" \n", `the body is empty`},
		{`[1, 2]`, `the body is an array, want an object`},
		{`{"tickMs": null}`, `"tickMs" is null`},
		{`{"challenge": {"mode": null}}`, `"challenge.mode" is null`},
		{`{"list": [null]}`, `"list" is null`},
		{`{"at": "2030-01-01T09:00:00Z"}`, ""},
		{`{"at": "2030-01-01T09:00:00.123456789+05:30"}`, ""},
		// The fuzzer's find: Go's time parsing takes a one-digit hour; the
		// others Go refuses itself.
		{`{"at": "0000-01-01T0:00:00Z"}`, `not an RFC 3339 date-time`},
		{`{"at": "2030-01-01T09:00:00"}`, `2030-01-01`},
		{`{"at": "2030-01-01T09:00:00.Z"}`, `2030-01-01`},
		{`{"at": "2030-01-01T09:00:00+0530"}`, `2030-01-01`},
		{`{"at": "2030-01-01 09:00:00Z"}`, `2030-01-01`},
		{`{"at": "2030-13-01T09:00:00Z"}`, `month out of range`},
		// A name twice in one object: encoding/json keeps the last, a
		// proxy in front may have checked the first.
		{`{"tickMs": 5, "tickMs": 6}`, `json: "tickMs" appears twice`},
		{`{"tickMs": null, "tickMs": 6}`, `json: "tickMs" appears twice`},
		{`{"tickMs": 5, "tick\u004ds": 6}`, `json: "tickMs" appears twice`},
		{`{"challenge": {"mode": "log", "mode": "enforce"}}`, `json: "challenge.mode" appears twice`},
		{`{"ptr": {"mode": "y"}, "ptr": {"mode": "z"}}`, `json: "ptr" appears twice`},
		{`{"list": [{"mode": "x"}, {"mode": "x", "mode": "y"}]}`, `json: "list.mode" appears twice`},
		{`{"challenge": {"mode": "a"}, "ptr": {"mode": "b"}, "list": [{"mode": "c"}, {"mode": "d"}]}`, ""},
	} {
		var b body
		err := DecodeBody([]byte(tc.in), &b)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.in, err)
		case tc.refused != "" && err == nil:
			t.Errorf("%s: accepted, want refused (%s)", tc.in, tc.refused)
		case tc.refused != "" && !strings.Contains(err.Error(), tc.refused):
			t.Errorf("%s: refused with %q, want it to name %s", tc.in, err, tc.refused)
		}
	}
}
