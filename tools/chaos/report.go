package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// writeReliability writes RELIABILITY.md: one table, a row per scenario.
func writeReliability(path string, results []result, o options) error {
	var b strings.Builder
	b.WriteString("# Reliability: usher under injected faults\n\n")
	fmt.Fprintf(&b, "Written by `go run ./tools/chaos -all -reliability %s` (`make chaos`) on %s, seed %d, services built from %s",
		filepath.Base(path), time.Now().UTC().Format("2006-01-02 15:04 UTC"), o.seed, o.source)
	if o.quick {
		b.WriteString(", quick timings")
	}
	if o.parallel > 1 {
		fmt.Fprintf(&b, ", up to %d scenarios at once", o.parallel)
	}
	b.WriteString(". Each scenario starts a fresh stack on loopback — a 3-node JetStream cluster (R3 streams), " +
		"a Redis Cluster of 3 masters and 3 replicas (AOF, fsync every second), PostgreSQL, pgsim and two of every " +
		"service — runs shoppers through it, injects one fault, lets the pipeline drain and checks the invariants " +
		"from the load client's journal, the streams (and `usherctl audit`), Redis, PostgreSQL and pgsim's ledger. " +
		"See `tools/chaos/` for what each check means.\n\n")
	b.WriteString("Columns: *lost* — accepted joins neither admitted, left nor waiting; *admitted twice* — places in line " +
		"given two tokens; *over-admitted* — samples or admissions with more slots held than targetActive; *double charges* — " +
		"captures not matched one to one with a PAID order; *recovery* — from the fault until admissions on the fixed-rate " +
		"queue are back to 90 % of their rate before it (judged over 3-second windows, so it reads at most 3 s late); " +
		"*bound* — how long that may take.\n\n")
	fmt.Fprintf(&b, "Recovery bounds. A fault in one of usher's own processes, in NATS or the network delays "+
		"admission by seconds, never by an ack wait: %v from the fault (the 3-second window included; in a rolling upgrade, "+
		"from the last restart begun before the dip); a dip that begins "+
		"only once the fault is healed — a resumed order worker's or a restarted PostgreSQL's burst of order events, "+
		"which the line applies before it admits again — gets as long from the heal (a dip running across the heal "+
		"counts from the fault). A fault that "+
		"pauses admission by design while it lasts — a payment gateway or PostgreSQL down (back-pressure: no order "+
		"finishes, so the slots taken stay held), or a Redis master and "+
		"its replica both dead (no copy of the shard exists until they restart) — is given the same %v from its heal. "+
		"A Redis master's death cannot be recovered from faster than Redis Cluster fails it over: the other masters "+
		"flag it within 1 to 1.5 node timeouts (cluster-node-timeout %v, as docs/operations.md's \"Running at scale\" recommends), "+
		"then a majority agrees and the replica waits out its election delay (about a second; 2 s allowed); then comes "+
		"usher's own part (2 s: its clients reread the slot map on the first failed command, the followers replay what "+
		"the replica had not received, the next tick admits) and the 3-second window: %v from the fault.\n\n",
		recoveryBound, recoveryBound, redisNodeTimeout, failoverBound)
	b.WriteString("| scenario | injected | verdict | joins accepted | lost | admitted twice | over-admitted | double charges | recovery | bound | failed invariants | command |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- |\n")
	for _, r := range results {
		f := r.Figures
		var failed []string
		for _, c := range r.Checks {
			if c.Status == statusFail {
				failed = append(failed, fmt.Sprintf("%s (%d)", c.Name, c.Count))
			}
		}
		if r.Error != "" {
			failed = append(failed, "harness error: "+r.Error)
		}
		cells := []string{r.Scenario, r.Injected, r.Verdict}
		if r.Verdict == verdictError {
			cells = append(cells, "–", "–", "–", "–", "–", "–", "–")
		} else {
			cells = append(cells, fmt.Sprint(f.JoinsAccepted), fmt.Sprint(f.Lost), fmt.Sprint(f.Duplicated),
				fmt.Sprint(f.OverAdmitted), fmt.Sprint(f.DoubleCharges), recoveryText(r), boundText(r.Timeline))
		}
		cells = append(cells, strings.Join(failed, "; "), "`"+r.Command+"`")
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	// The soak's and overload's blocks stay: this run measured neither.
	if old, err := os.ReadFile(path); err == nil {
		for _, name := range keptBlocks {
			if _, block := cutBlock(string(old), name); block != "" {
				b.WriteString("\n" + block + "\n")
			}
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// boundText says how long a scenario's recovery may take, and from when.
func boundText(tl timeline) string {
	from := "fault"
	if tl.RecoverFromHeal {
		from = "heal"
	}
	return fmt.Sprintf("%v from the %s", tl.bound(), from)
}
