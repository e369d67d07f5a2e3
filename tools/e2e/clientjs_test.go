package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clientDir is the JavaScript client's package (@usher/client).
const clientDir = "../../clients/js"

// nodePath returns the path of a Node.js of version 20 or later (global
// fetch, web streams). Like Chromium's, a missing one skips the test on a
// developer's machine and fails it in CI.
func nodePath(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short")
	}
	p, err := exec.LookPath("node")
	if err == nil {
		out, verr := exec.Command(p, "--version").Output()
		major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".", 2)[0])
		if verr == nil && major >= 20 {
			return p
		}
		err = fmt.Errorf("node %s is older than 20", strings.TrimSpace(string(out)))
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("no Node.js 20 or later (%v), and CI is set: scripts/deps.sh should have installed it", err)
	}
	t.Skipf("no Node.js 20 or later (%v); skipping the JavaScript client's tests", err)
	return ""
}

// wholeStack starts pgsim and the four services as make run does, the
// notifier's public URL its own address, and returns the gateway's base
// URL, the environment and the processes, once every one is ready.
func wholeStack(t *testing.T) (string, map[string]string, map[string]*service) {
	t.Helper()
	env := stackEnv(t, "PGSIM_LATENCY_MEAN_MS", "5")
	gw, adm, nt, ow := env["USHER_GATEWAY_ADDR"], env["USHER_ADMITTER_ADDR"], env["USHER_NOTIFIER_ADDR"], env["USHER_ORDERWORKER_ADDR"]
	env["USHER_NOTIFIER_PUBLIC_URL"] = "http://" + nt
	procs := map[string]*service{}
	for _, name := range []string{"pgsim", "gateway", "admitter", "notifier", "orderworker"} {
		procs[name] = start(t, name, env)
	}
	base := "http://" + gw
	waitReady(t, 60*time.Second, base, "http://"+adm, "http://"+nt, "http://"+ow)
	return base, env, procs
}

// The JavaScript client (clients/js) against the real stack: its own tests
// (clients/js/test, node --test) run with the stack's URLs in their
// environment — join, stream, READY, order, the quick-start snippet, a 429
// retried after its Retry-After, a proof of work, leave, abort, languages —
// then, with the notifier stopped, the poll fallback.
func TestClientJSAgainstTheStack(t *testing.T) {
	t.Parallel()
	node := nodePath(t)
	base, env, procs := wholeStack(t)
	stack := []string{"USHER_GATEWAY_URL=" + base, "USHER_NOTIFIER_URL=http://" + env["USHER_NOTIFIER_ADDR"], "USHER_ADMIN_TOKEN=e2e-admin"}

	files, err := filepath.Glob(filepath.Join(clientDir, "test", "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no tests in %s/test: %v", clientDir, err)
	}
	t.Run("every service up", func(t *testing.T) {
		nodeTest(t, node, stack, files)
	})
	procs["notifier"].kill(t)
	t.Run("the notifier down", func(t *testing.T) {
		nodeTest(t, node, append(stack, "USHER_NOTIFIER_DOWN=1"), []string{filepath.Join(clientDir, "test", "fallback.test.mjs")})
	})
}

// nodeTest runs node --test on files (paths from here) in the client's
// folder, with env on top of this process's, and fails if any test fails
// or none ran.
func nodeTest(t *testing.T, node string, env, files []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"--test", "--test-reporter=spec"}
	for _, f := range files {
		args = append(args, strings.TrimPrefix(filepath.ToSlash(f), clientDir+"/"))
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = clientDir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("node %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
	if m := regexp.MustCompile(`(?m)^ℹ pass (\d+)$`).FindSubmatch(out); m == nil || string(m[1]) == "0" {
		t.Fatal("node --test passed no test")
	}
}

// The quick-start snippet docs/integration.md and the package's README
// show is the file the client's tests run
// (clients/js/examples/quickstart.mjs), verbatim.
func TestClientJSSnippetIsTheOneTheDocsShow(t *testing.T) {
	t.Parallel()
	snippet, err := os.ReadFile(filepath.Join(clientDir, "examples", "quickstart.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{"../../docs/integration.md", clientDir + "/README.md"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(text), "```js\n"+string(snippet)+"```\n") {
			t.Errorf("%s does not show clients/js/examples/quickstart.mjs as it is:\n%s", doc, snippet)
		}
	}
}
