package contract_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"usher/api/contract"
)

// Events are held to the schema the document names for their name.
func TestContractChecksEvents(t *testing.T) {
	d, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	const path = "/v1/queues/{queue}/tickets/{ticket}/events"
	tests := []struct {
		name, data, wantErr string
	}{
		{"position", `{"position":42,"waiting":1200,"etaSeconds":3}`, ""},
		{"position", `{"position":42}`, "waiting"},
		{"position", `{"position":0,"waiting":1}`, "minimum"},
		{"position", `{"position":1,"waiting":1,"surprise":true}`, "surprise"},
		{"ready", `{"token":"eyJ","readyAt":"2026-11-29T21:29:18.71Z","expiresAt":"2026-11-29T21:34:18.71Z"}`, ""},
		{"ready", `{"token":"eyJ","readyAt":"tomorrow","expiresAt":"2026-11-29T21:34:18.71Z"}`, "date-time"},
		{"closed", `{"reason":"sold_out"}`, ""},
		{"notice", `{}`, ""},
		{"notice", `{"message":"hi","level":"info","since":"2026-11-29T21:29:18Z"}`, ""},
		{"notice", `{"message":"hi","level":"loud","since":"2026-11-29T21:29:18Z"}`, "notice"},
		{"gossip", `{}`, "not in the document"},
	}
	for _, tt := range tests {
		err := d.CheckEvent(path, "GET", tt.name, []byte(tt.data))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s %s: %v, want it valid", tt.name, tt.data, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s %s: %v, want an error naming %q", tt.name, tt.data, err, tt.wantErr)
		}
	}
	if ev := d.Events("/v1/admin/ops/stream", "GET"); ev["queues"] != "OpsSnapshot" {
		t.Errorf("ops stream events = %v", ev)
	}
}

// A path parameter is held to its schema decoded, as OpenAPI reads it: a
// client may percent-encode any character of a segment (%64emo is the
// queue demo), while a segment that decodes to no valid value, an escaped
// slash one, is refused. An encoded name is checked as what it decodes to:
// checked as spelled — %2564emo, decoded once to %64emo — it would be
// refused whatever it named.
func TestContractDecodesPathParameters(t *testing.T) {
	d, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		target  string
		refused bool
	}{
		{"/v1/queues/demo", false},
		{"/v1/queues/%64emo", false},
		{"/v1/queues/%64%65%6D%6F", false},
		{"/v1/queues/%2564emo", true}, // %64emo: no queue name
		{"/v1/queues/a%2Fb", true},
		{"/v1/queues/a%20b", true},
	}
	for _, tt := range tests {
		req := httptest.NewRequest("GET", tt.target, nil)
		body := []byte(`{"name":"demo","state":"open","waiting":0,"admitted":0}`)
		res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}
		err := d.Check(contract.Gateway, req, nil, res, body)
		refused := err != nil && strings.Contains(err.Error(), "the document refuses this request")
		if refused != tt.refused {
			t.Errorf("GET %s answered 200: %v, want refused %v", tt.target, err, tt.refused)
		}
	}
}

// A header field's value is read as the service reads it off the wire,
// without the spaces and tabs around it (RFC 9110 §5.5): a test that sets
// " BeArer x" sent the Authorization "BeArer x", which opens the admin API
// (the gateway's FuzzAuthorization found the checker refusing it).
func TestContractTrimsFieldValues(t *testing.T) {
	d, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		auth    string
		refused bool
	}{
		{"Bearer x", false},
		{" BeArer x", false},
		{"Bearer x\t", false},
		{"Basic eDp4", true},
	}
	for _, tt := range tests {
		req := httptest.NewRequest("GET", "/v1/admin/queues/demo", nil)
		req.Header.Set("Authorization", tt.auth)
		res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}}
		err := d.Check(contract.Gateway, req, nil, res, []byte(`{}`))
		refused := err != nil && strings.Contains(err.Error(), "the document refuses this request")
		if refused != tt.refused {
			t.Errorf("GET with Authorization %q answered 200: %v, want refused %v", tt.auth, err, tt.refused)
		}
	}
}
