package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// quietRedis is a go-redis logger that says nothing.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// errFailed says some scenario failed; the summary has been printed.
var errFailed = errors.New("scenarios failed")

// usageError is a bad command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// options is the command line.
type options struct {
	list        bool
	all         bool
	names       []string
	seed        uint64
	quick       bool
	parallel    int
	keep        bool
	out         string
	reliability string
	rev         string
	source      string // what the services were built from
	skewRef     string // the previous release, for version-skew
	soak        time.Duration
	soakReport  string
	partition   time.Duration // 0: the timing's
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.list, "list", false, "list the scenarios and exit")
	fs.BoolVar(&o.all, "all", false, "run every scenario")
	scen := fs.String("scenario", "", "run these scenarios (comma-separated names)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of every random choice: which process, which queue, when, the shoppers")
	fs.BoolVar(&o.quick, "quick", false, "shorter phases and a lighter load (the go test smoke)")
	fs.IntVar(&o.parallel, "parallel", 1, "run up to this many scenarios at once, each on its own stack (the go test smoke; "+
		"the stacks share the machine, so the rate and recovery figures measure less)")
	fs.BoolVar(&o.keep, "keep", false, "keep every scenario's data folder and logs, pass or fail")
	fs.StringVar(&o.out, "out", "", "folder for results, journals and the logs of failed scenarios (default .usher/chaos under the module root)")
	fs.StringVar(&o.reliability, "reliability", "", "write a RELIABILITY.md table of the results to this file")
	fs.StringVar(&o.rev, "rev", "", "build the services from this git revision (e.g. HEAD) instead of the working tree (default $CHAOS_REV)")
	fs.StringVar(&o.skewRef, "skew-ref", "", "the previous release version-skew runs half the copies on (default $CHAOS_SKEW_REF, else "+defaultSkewRef+")")
	fs.DurationVar(&o.soak, "soak", 10*time.Minute, "how long the soak scenario runs its load (an hour for the published figures)")
	fs.StringVar(&o.soakReport, "soak-report", "", "put the soak's table in this file (RELIABILITY.md: make soak)")
	fs.DurationVar(&o.partition, "partition", 0, "how long the partition scenarios hold their cut (partition-nats-leader: at least until the election and 2 s more); default 12s, -quick 6s")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./tools/chaos -list | -scenario NAME[,NAME…] [-seed N] | -all [-reliability FILE]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageError{err.Error()}
	}
	if o.parallel < 1 {
		return o, usageError{fmt.Sprintf("-parallel %d: at least 1", o.parallel)}
	}
	if fs.NArg() > 0 {
		return o, usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	if *scen != "" {
		o.names = strings.Split(*scen, ",")
	}
	if !o.list && !o.all && len(o.names) == 0 {
		fs.Usage()
		return o, usageError{"name a scenario (-scenario), or -all, or -list"}
	}
	return o, nil
}

// run is the harness: it parses the command line, builds the binaries once
// and runs the chosen scenarios one after another.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	o, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if o.rev == "" {
		o.rev = getenv("CHAOS_REV")
	}
	if o.skewRef == "" {
		o.skewRef = cmp.Or(getenv("CHAOS_SKEW_REF"), defaultSkewRef)
	}
	// The harness's own Redis clients dial dead nodes by design while a
	// Redis fault lasts; go-redis would log every failed dial.
	redis.SetLogger(quietRedis{})
	if o.list {
		for _, sc := range scenarios() {
			fmt.Fprintf(stdout, "%-24s %s\n", sc.name, sc.what)
		}
		return nil
	}
	chosen, err := chooseScenarios(o)
	if err != nil {
		return err
	}
	if o.out == "" {
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		o.out = filepath.Join(root, ".usher", "chaos")
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	tmp, cleanUp, err := runFolder(o.keep, stdout)
	if err != nil {
		return err
	}
	defer cleanUp()
	start := time.Now()
	skewRef := ""
	if slices.ContainsFunc(chosen, func(sc scenario) bool { return sc.skewed }) {
		skewRef = o.skewRef
	}
	bins, tmpl, err := buildStack(ctx, tmp, o.rev, skewRef, stdout)
	if err != nil {
		return err
	}
	o.source = describeSource(ctx, o.rev)
	fmt.Fprintf(stdout, "chaos: services built from %s\n", o.source)
	out := &lockedWriter{w: stdout}
	re := &runEnv{bins: bins, tmp: tmp, pgTmpl: tmpl, out: o.out, quick: o.quick, keep: o.keep,
		soak: o.soak, soakReport: o.soakReport, partition: o.partition, progress: out, began: start}
	results := runAll(ctx, re, chosen, o.seed, o.parallel, out)
	fmt.Fprintf(stdout, "\nchaos: %d scenario(s) in %s\n", len(results), time.Since(start).Round(time.Second))
	if err := writeResults(stdout, o, results); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for _, r := range results {
		if r.Verdict != verdictPass {
			return errFailed
		}
	}
	return nil
}

// chooseScenarios are the scenarios -scenario names, or all of them with
// -all.
func chooseScenarios(o options) ([]scenario, error) {
	all := scenarios()
	if o.all {
		var every []scenario
		for _, sc := range all {
			if !sc.named {
				every = append(every, sc)
			}
		}
		return every, nil
	}
	var chosen []scenario
	for _, n := range o.names {
		sc, ok := find(all, strings.TrimSpace(n))
		if !ok {
			return nil, usageError{fmt.Sprintf("no scenario %q (go run ./tools/chaos -list)", n)}
		}
		chosen = append(chosen, sc)
	}
	return chosen, nil
}

// runFolder makes the run's temporary folder; cleanUp removes it, or with
// -keep says where every scenario's data (the JetStream stores, Redis's
// files) stayed for a look afterwards.
func runFolder(keep bool, stdout io.Writer) (tmp string, cleanUp func(), err error) {
	tmp, err = os.MkdirTemp("", "usher-chaos-")
	if err != nil {
		return "", nil, err
	}
	cleanUp = func() { _ = os.RemoveAll(tmp) }
	if keep {
		cleanUp = func() { fmt.Fprintf(stdout, "chaos: kept every scenario's data folder under %s\n", tmp) }
	}
	// PostgreSQL (as its own user) must reach its folder inside.
	if err := os.Chmod(tmp, 0o755); err != nil {
		cleanUp()
		return "", nil, err
	}
	return tmp, cleanUp, nil
}

// buildStack builds the binaries into tmp (and the release skewRef's, when
// set) and, meanwhile, initdb's template of the PostgreSQL data folder.
func buildStack(ctx context.Context, tmp, rev, skewRef string, stdout io.Writer) (*binaries, string, error) {
	start := time.Now()
	fmt.Fprintf(stdout, "chaos: building the services, usherctl and nats-server; run folder %s\n", tmp)
	pgBin, err := postgresBin()
	if err != nil {
		return nil, "", err
	}
	var bins *binaries
	var tmpl string
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { bins, err = build(gctx, filepath.Join(tmp, "bin"), rev); return err })
	g.Go(func() (err error) { tmpl, err = pgTemplate(gctx, tmp, pgBin); return err })
	var prev *binaries
	if skewRef != "" {
		g.Go(func() (err error) { prev, err = build(gctx, filepath.Join(tmp, "bin-previous"), skewRef); return err })
	}
	if err := g.Wait(); err != nil {
		return nil, "", err
	}
	bins.source = describeSource(ctx, rev)
	if prev != nil {
		prev.source = skewRef + " (" + describeSource(ctx, skewRef) + ")"
		bins.previous = prev
	}
	fmt.Fprintf(stdout, "chaos: built in %s\n", time.Since(start).Round(100*time.Millisecond))
	return bins, tmpl, nil
}

// writeResults prints the summary and writes the reliability table (with
// -reliability) and results.json.
func writeResults(stdout io.Writer, o options, results []result) error {
	printSummary(stdout, results)
	if o.reliability != "" {
		if err := writeReliability(o.reliability, results, o); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "chaos: wrote %s\n", o.reliability)
	}
	return writeJSON(filepath.Join(o.out, "results.json"), results)
}

// runAll runs the scenarios, up to parallel at once, each on its own
// stack, and prints each result as it comes. The results are in the order
// of chosen; a scenario the context's end kept from starting has none.
func runAll(ctx context.Context, re *runEnv, chosen []scenario, seed uint64, parallel int, out *lockedWriter) []result {
	ran := make([]*result, len(chosen))
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, sc := range chosen {
		slots <- struct{}{}
		if ctx.Err() != nil {
			<-slots
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			res := runScenario(ctx, re, sc, seed)
			ran[i] = &res
			out.mu.Lock()
			printResult(out.w, res)
			out.mu.Unlock()
		}()
	}
	wg.Wait()
	var results []result
	for _, r := range ran {
		if r != nil {
			results = append(results, *r)
		}
	}
	return results
}

// lockedWriter serialises the progress lines of scenarios run at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func find(all []scenario, name string) (scenario, bool) {
	for _, sc := range all {
		if sc.name == name {
			return sc, true
		}
	}
	return scenario{}, false
}

// printResult prints one scenario's verdict, its failed checks with their
// evidence, and on failure the command that reproduces it.
func printResult(w io.Writer, r result) {
	fmt.Fprintf(w, "\n== %s (seed %d): %s in %s\n", r.Scenario, r.Seed, r.Verdict, r.Took)
	for _, f := range r.Faults {
		fmt.Fprintf(w, "   %s\n", f)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "   error: %s\n", r.Error)
	}
	f := r.Figures
	if r.Verdict != verdictError {
		fmt.Fprintf(w, "   joins accepted %d (refused %d, of which %d stored anyway), admitted %d, orders PAID %d; lost %d, admitted twice %d, over-admitted %d, double charges %d, recovery %s\n",
			f.JoinsAccepted, f.JoinsRefused, f.RefusedButStored, f.Admitted, f.OrdersPaid, f.Lost, f.Duplicated, f.OverAdmitted, f.DoubleCharges, recoveryText(r))
	}
	if r.Verdict == verdictFail && len(f.AdmissionsPerSecond) > 0 {
		fmt.Fprintf(w, "   admissions/s of the fixed-rate queue from the load's start (fault at %.0fs, heal at %.0fs): %v\n",
			r.Timeline.Inject.Sub(r.Timeline.Start).Seconds(), r.Timeline.Heal.Sub(r.Timeline.Start).Seconds(), f.AdmissionsPerSecond)
	}
	for _, c := range r.Checks {
		switch c.Status {
		case statusFail:
			fmt.Fprintf(w, "   FAIL %s (%d): %s\n", c.Name, c.Count, c.Invariant)
			for _, e := range c.Examples {
				fmt.Fprintf(w, "        %s\n", e)
			}
			if c.Note != "" {
				fmt.Fprintf(w, "        note: %s\n", c.Note)
			}
		case statusSkipped:
			fmt.Fprintf(w, "   skipped %s: %s\n", c.Name, c.Note)
		default:
			fmt.Fprintf(w, "   ok   %s\n", c.Name)
		}
	}
	if r.Verdict != verdictPass {
		fmt.Fprintf(w, "   reproduce: %s\n", r.Command)
		if r.Dir != "" {
			fmt.Fprintf(w, "   journal and logs: %s\n", r.Dir)
		}
	}
}

func recoveryText(r result) string {
	switch {
	case r.Verdict == verdictError:
		return "–"
	case !r.Figures.Recovered:
		return fmt.Sprintf("not recovered (%.0fs)", r.Figures.RecoverySecs)
	case r.Figures.RecoverySecs == 0:
		return "no dip"
	default:
		return fmt.Sprintf("%.1fs", r.Figures.RecoverySecs)
	}
}

func printSummary(w io.Writer, results []result) {
	for _, r := range results {
		line := fmt.Sprintf("  %-24s %-5s", r.Scenario, r.Verdict)
		var failed []string
		for _, c := range r.Checks {
			if c.Status == statusFail {
				failed = append(failed, c.Name)
			}
		}
		if len(failed) > 0 {
			line += "  " + strings.Join(failed, ", ")
		}
		if r.Error != "" {
			line += "  " + r.Error
		}
		fmt.Fprintln(w, line)
	}
}
