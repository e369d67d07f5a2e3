package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// A key file that cannot be used stops the start with the variable that
// names it, before anything is dialled (each key file's case is
// internal/shopper's TestKeyFilesNameTheVariableOfAnUnusableFile; here, that
// run reports it).
func TestRunNamesTheVariableOfAnUnusableKeyFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	env := map[string]string{
		"USHER_DATA_DIR": t.TempDir(), "USHER_VERIFY_KEY_FILES": missing,
		// Nothing listens here: run must not get as far as dialling.
		"USHER_NATS_URL": "nats://127.0.0.1:1", "USHER_REDIS_URL": "redis://127.0.0.1:1",
	}
	err := run(context.Background(), func(k string) string { return env[k] }, io.Discard)
	if want := "USHER_VERIFY_KEY_FILES=" + missing; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("run with USHER_VERIFY_KEY_FILES=%s = %v, want an error saying %q", missing, err, want)
	}
}
