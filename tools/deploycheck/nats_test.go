package deploycheck

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// natsCompose is the part of compose.yaml that says who reaches NATS and
// with which key.
type natsCompose struct {
	Services map[string]struct {
		Build       *struct{ Args map[string]string } `yaml:"build"`
		Environment map[string]string                 `yaml:"environment"`
		Ports       []string                          `yaml:"ports"`
		Volumes     []any                             `yaml:"volumes"`
	} `yaml:"services"`
}

// Compose runs the secure form: NATS is not published on the host, and
// every usher service connects with its own NKey, mounting the folder of
// its own key and no other.
func TestComposeRunsNATSWithAKeyPerService(t *testing.T) {
	b, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c natsCompose
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for name, svc := range c.Services {
		for _, p := range svc.Ports {
			if strings.Contains(p, "4222") {
				t.Errorf("service %s publishes NATS on the host (%s)", name, p)
			}
		}
	}
	for _, role := range []string{"gateway", "admitter", "notifier", "orderworker"} {
		svc, ok := c.Services[role]
		if !ok {
			t.Errorf("compose.yaml has no %s", role)
			continue
		}
		if got, want := svc.Environment["USHER_NATS_NKEY_FILE"], "/run/nats/"+role+".nk"; got != want {
			t.Errorf("%s: USHER_NATS_NKEY_FILE = %q, want %q", role, got, want)
		}
		var keys []string
		for _, v := range svc.Volumes {
			m, ok := v.(map[string]any)
			if !ok || m["source"] != "nats-auth" {
				continue
			}
			sub, _ := m["volume"].(map[string]any)
			keys = append(keys, func() string { s, _ := sub["subpath"].(string); return s }())
			if m["read_only"] != true {
				t.Errorf("%s mounts its key writable", role)
			}
		}
		if len(keys) != 1 || keys[0] != role {
			t.Errorf("%s mounts the key folders %q of nats-auth, want only its own (%q)", role, keys, role)
		}
	}
}
