package shopper_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"usher/internal/config"
	"usher/internal/shopper"
	"usher/internal/ticket"
)

// A key or secret file that cannot be used is an error naming the
// variable that names it: the gateway and the notifier stop their start
// with it, before anything is dialled.
func TestKeyFilesNameTheVariableOfAnUnusableFile(t *testing.T) {
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
		env := config.New(func(k string) string { return map[string]string{tt.name: tt.value}[k] })
		_, _, err := shopper.LoadKeyFiles(env, t.TempDir()).Open()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open with %s=%s = %v, want an error saying %q", tt.name, tt.value, err, tt.want)
		}
	}
}

// With no variable set, the keys live under the data folder: created on
// the first start, the same ones read on the next.
func TestKeyFilesDefaultToTheDataFolder(t *testing.T) {
	data := t.TempDir()
	files := shopper.LoadKeyFiles(config.New(func(string) string { return "" }), data)
	_, first, err := files.Open()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"signing.key", "ticket.secret"} {
		if _, err := os.Stat(filepath.Join(data, name)); err != nil {
			t.Errorf("%s not in the data folder: %v", name, err)
		}
	}
	_, again, err := files.Open()
	if err != nil {
		t.Fatal(err)
	}
	tk := ticket.Ticket{Queue: "q", User: "u", Epoch: "e", Seq: 7}
	if got, err := again.Parse(first.Issue(tk)); err != nil || got != tk {
		t.Errorf("a ticket of the first start, read on the next = %+v, %v; want %+v", got, err, tk)
	}
}
