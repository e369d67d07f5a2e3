package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A key or secret file that cannot be used stops the start with the
// variable that names it, before anything is dialled.
func TestRunNamesTheVariableOfAnUnusableKeyFile(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.secret")
	if err := os.WriteFile(short, []byte("too short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name, value string
		want        string
	}{
		{"USHER_TICKET_SECRET_FILE", short, "USHER_TICKET_SECRET_FILE=" + short + ": "},
		{"USHER_SIGNING_KEY_FILE", dir, "USHER_SIGNING_KEY_FILE=" + dir},
		{"USHER_VERIFY_KEY_FILES", missing, "USHER_VERIFY_KEY_FILES=" + missing},
	}
	for _, tt := range tests {
		env := map[string]string{
			"USHER_DATA_DIR": t.TempDir(), tt.name: tt.value,
			// Nothing listens here: run must not get as far as dialling.
			"USHER_NATS_URL": "nats://127.0.0.1:1", "USHER_REDIS_URL": "redis://127.0.0.1:1",
		}
		err := run(context.Background(), func(k string) string { return env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run with %s=%s = %v, want an error saying %q", tt.name, tt.value, err, tt.want)
		}
	}
}
