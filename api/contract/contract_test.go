package contract_test

import (
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
