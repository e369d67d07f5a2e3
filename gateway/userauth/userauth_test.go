package userauth

import (
	"log/slog"
	"testing"
	"time"
)

// A short secret is refused at start, not used.
func TestUserJWTSecretTooShort(t *testing.T) {
	s := Settings{Mode: ModeJWTHS256, SecretFile: "x", SecretLoader: func(string) ([]byte, error) { return []byte("short\n"), nil }}
	if _, _, err := New(s, time.Now, slog.Default()); err == nil {
		t.Fatal("New with a 5-byte secret = nil error")
	}
}
