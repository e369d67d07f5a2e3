// Package chromium starts the headless Chromium that browser tests drive
// (with chromedp): the one place that knows how to find it and which flags
// this machine needs.
package chromium

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// Path returns the path of Debian's chromium. A browser test is a long
// one: under -short it skips. Without chromium it skips on a developer's
// machine and fails in CI (CI set), where scripts/deps.sh must have
// installed it.
func Path(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short")
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed, and CI is set: scripts/deps.sh should have installed it")
	}
	t.Skip("chromium is not installed (make deps installs it); skipping the browser test")
	return ""
}

// Start starts Chromium at bin, headless, with a fresh profile and the
// flags this machine needs (no network: without them Chromium hangs on
// lookups), for the life of the test. The context drives its first tab.
func Start(t testing.TB, bin string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}
