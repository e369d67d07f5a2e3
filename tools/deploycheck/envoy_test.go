package deploycheck

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// envoyFilter is the filter the guide configures; a refusal names it.
const envoyFilter = `http filter "envoy.filters.http.ext_authz"`

// envoySnippet is docs/integration.md's Envoy configuration: the yaml
// block after the "**Envoy**" paragraph.
func envoySnippet(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/integration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n**Envoy**")
	if !ok {
		t.Fatal(`docs/integration.md has no "**Envoy**" paragraph`)
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatal("docs/integration.md has no yaml block after its Envoy paragraph")
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatal("docs/integration.md's Envoy yaml block is not closed")
	}
	return block
}

// envoyCheck runs envoycheck on config, returning its output, what it
// said on stderr and its exit code.
func envoyCheck(t *testing.T, config string) (stdout, stderr string, code int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := tool(t, "envoycheck", path)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("envoycheck: %v", err)
	}
	return out.String(), errOut.String(), code
}

// The guide's Envoy filters decode strictly into Envoy's v3 API types
// (HttpConnectionManager's http_filters, each typed_config resolved to
// ext_authz's or the router's type) and pass the validation rules
// Envoy's API declares: what Envoy checks when it loads them.
func TestEnvoySnippetDecodesIntoEnvoysOwnTypes(t *testing.T) {
	out, stderr, code := envoyCheck(t, envoySnippet(t))
	if code != 0 || !strings.Contains(out, "ok: 2 http filters") {
		t.Fatalf("envoycheck on docs/integration.md's Envoy snippet: exit %d, want 0 and 2 filters:\n%s%s", code, out, stderr)
	}
	if stderr != "" {
		t.Logf("envoycheck: %s", stderr)
	}
}

// A misspelt field or a value of the wrong type is refused, naming the
// filter and the field, instead of being ignored.
func TestEnvoyCheckRefusesAMisspeltOrMistypedField(t *testing.T) {
	tests := []struct {
		name, from, to, want string
	}{
		{"misspelt", "failure_mode_allow:", "failure_mode_alow:", `typed_config.failure_mode_alow: unknown field "failure_mode_alow"`},
		{"mistyped", "timeout: 0.5s", `timeout: "soon"`, "typed_config.http_service.server_uri.timeout: invalid google.protobuf.Duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refused(t, tt.from, tt.to, tt.want)
		})
	}
}

// A configuration that decodes but breaks a rule Envoy's API declares
// (an empty server URI) or its filter chain rule (the terminal router
// last) is refused too.
func TestEnvoyCheckRefusesWhatEnvoysValidationRefuses(t *testing.T) {
	t.Run("empty uri", func(t *testing.T) {
		refused(t, `uri: "http://usher-gateway:8080"`, `uri: ""`, "HttpUri.Uri: value length must be at least 1")
	})
	t.Run("no router", func(t *testing.T) {
		snippet := envoySnippet(t)
		authz, _, ok := strings.Cut(snippet, "  - name: envoy.filters.http.router\n")
		if !ok {
			t.Fatal("the Envoy snippet has no router filter")
		}
		_, stderr, code := envoyCheck(t, authz)
		if code != 1 || !strings.Contains(stderr, envoyFilter) || !strings.Contains(stderr, "must be a terminal filter") {
			t.Errorf("envoycheck without the router: exit %d, want 1 and the chain's rule:\n%s", code, stderr)
		}
	})
}

// refused checks that envoycheck refuses the guide's snippet with from
// replaced by to, naming the ext_authz filter and want.
func refused(t *testing.T, from, to, want string) {
	t.Helper()
	snippet := envoySnippet(t)
	if !strings.Contains(snippet, from) {
		t.Fatalf("the Envoy snippet has no %q to change", from)
	}
	_, stderr, code := envoyCheck(t, strings.Replace(snippet, from, to, 1))
	if code != 1 || !strings.Contains(stderr, envoyFilter) || !strings.Contains(stderr, want) {
		t.Errorf("envoycheck with %q for %q: exit %d, want 1 naming %s and %q:\n%s", to, from, code, envoyFilter, want, stderr)
	}
}
