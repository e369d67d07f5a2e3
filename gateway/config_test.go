package main

import (
	"strings"
	"testing"

	"usher/shared/config"
)

// USHER_NOTIFIER_PUBLIC_URL starts every events URL a join or poll
// answers: a value no browser can open stops the start, naming the
// variable, and a trailing slash does not double the path's.
func TestNotifierPublicURLIsCheckedAtStartUp(t *testing.T) {
	tests := []struct {
		value      string
		wantEvents string // the events URL of ticket "t" in queue "demo"; "" when refused
	}{
		{"", "/v1/queues/demo/tickets/t/events"},
		{"http://127.0.0.1:8081", "http://127.0.0.1:8081/v1/queues/demo/tickets/t/events"},
		{"https://events.shop.example/", "https://events.shop.example/v1/queues/demo/tickets/t/events"},
		{"https://shop.example/usher/", "https://shop.example/usher/v1/queues/demo/tickets/t/events"},
		{"notifier:8081", ""},
		{"notifier.example:8081/", ""},
		{"events.shop.example", ""},
		{"ftp://events.shop.example", ""},
		{"https://", ""},
		{"https://user:pw@events.shop.example", ""},
		{"https://events.shop.example/?x=1", ""},
		{"https://events.shop.example/#top", ""},
	}
	for _, tt := range tests {
		env := map[string]string{"USHER_NOTIFIER_PUBLIC_URL": tt.value}
		s, err := loadSettings(config.New(func(k string) string { return env[k] }))
		if tt.wantEvents == "" {
			if err == nil || !strings.Contains(err.Error(), "USHER_NOTIFIER_PUBLIC_URL") {
				t.Errorf("USHER_NOTIFIER_PUBLIC_URL=%q: loadSettings = %v, want refused naming USHER_NOTIFIER_PUBLIC_URL", tt.value, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("USHER_NOTIFIER_PUBLIC_URL=%q: loadSettings = %v, want it to start", tt.value, err)
			continue
		}
		a := &api{notifierURL: s.notifierURL}
		if got := a.eventsURL("demo", "t"); got != tt.wantEvents {
			t.Errorf("USHER_NOTIFIER_PUBLIC_URL=%q: events URL = %q, want %q", tt.value, got, tt.wantEvents)
		}
	}
}
