package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"usher/shared/testenv"
)

// smokeScenarios exercise three different components: a service process
// (the admitter), Redis (a master's failover) and NATS (the stream
// leader's death).
var smokeScenarios = []string{"kill-admitter", "redis-master-failover", "nats-leader-kill"}

// TestSmoke runs three scenarios end to end with quick timings: the real
// binaries on a JetStream cluster and a Redis Cluster, a fault each, and
// every invariant checked. It is a specification: a scenario that breaks
// an invariant fails the test, with the evidence and the command that
// reproduces it. go test -short skips it.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 17 processes per scenario; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Results, journals and the logs of failed scenarios outlive the test
	// (.usher/ is ignored by git and removed by make clean).
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, ".usher", "chaos-smoke")
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	var log testenv.Buffer
	err = run(ctx, []string{"-scenario", strings.Join(smokeScenarios, ","), "-seed", "1", "-quick", "-out", out}, os.Getenv, &log)
	b, rerr := os.ReadFile(filepath.Join(out, "results.json"))
	if rerr != nil {
		t.Fatalf("no results (run: %v): %v\n%s", err, rerr, log.String())
	}
	var results []result
	if err := json.Unmarshal(b, &results); err != nil {
		t.Fatal(err)
	}
	if len(results) != len(smokeScenarios) {
		t.Fatalf("%d results, want %d\n%s", len(results), len(smokeScenarios), log.String())
	}
	for _, r := range results {
		t.Run(r.Scenario, func(t *testing.T) {
			if r.Verdict == verdictError {
				t.Fatalf("the harness could not run it: %s\n%s", r.Error, log.String())
			}
			if len(r.Faults) == 0 || r.Timeline.Inject.IsZero() {
				t.Errorf("no fault was injected: %+v", r.Timeline)
			}
			if r.Figures.JoinsAccepted == 0 || r.Figures.Admitted == 0 || r.Figures.OrdersPaid == 0 {
				t.Errorf("the load did not run through: %+v", r.Figures)
			}
			for _, c := range r.Checks {
				if c.Status == statusFail {
					t.Errorf("%s: %s — %d exception(s), e.g.:\n  %s", c.Name, c.Invariant, c.Count, strings.Join(c.Examples, "\n  "))
				}
			}
			if t.Failed() {
				t.Logf("reproduce: %s", r.Command)
			}
		})
	}
}
