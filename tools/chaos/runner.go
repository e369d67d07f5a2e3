package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"usher/internal/event"
	"usher/internal/keyspace"
)

// The order worker's deadline and ack wait in every scenario: shorter
// than production's 60 s and 30 s, so a run of about a minute sees orders
// through both.
const (
	orderDeadline = 20 * time.Second
	orderAckWait  = 10 * time.Second
)

// warmLimit bounds how much longer than its warm-up a scenario waits for
// the load's first paid order before it injects the fault.
const warmLimit = 30 * time.Second

// errNonePaid is the warm-up's wait, not yet over: the load has seen no
// order paid.
var errNonePaid = errors.New("no order paid yet")

// timing is how long each phase of a scenario lasts. settle exceeds grace
// + orderDeadline + pendingMargin, so that an order stuck PENDING is past
// its deadline by the end and fails a safety check (orders final),
// whatever the timed drain check says.
type timing struct {
	warm      time.Duration // load before the fault (the baseline)
	after     time.Duration // load after the heal (recovery)
	grace     time.Duration // shoppers finish their orders after the joins stop
	settle    time.Duration // deadline for the pipeline to drain
	down      time.Duration // a killed process stays down this long
	outage    time.Duration // payment gateway modes last this long
	partition time.Duration // a partition lasts this long
	// soak is how long the soak runs its load (-soak), and soakReport the
	// file its table goes into (-soak-report; "": none).
	soak       time.Duration
	soakReport string
}

var (
	fullTiming  = timing{warm: 10 * time.Second, after: 12 * time.Second, grace: 3 * time.Second, settle: 60 * time.Second, down: 5 * time.Second, outage: 10 * time.Second, partition: 12 * time.Second}
	quickTiming = timing{warm: 6 * time.Second, after: 6 * time.Second, grace: 2 * time.Second, settle: 45 * time.Second, down: 2 * time.Second, outage: 5 * time.Second, partition: 6 * time.Second}
)

// workload returns the queues of a run. Demand exceeds the fixed rate on
// "rate" (its admissions per second are checked), the slots bind on "cap"
// (over-admission shows there), and "mix" runs below capacity.
func workload(quick bool) []queueSpec {
	if quick {
		return []queueSpec{
			{Name: "rate", TargetActive: 2000, MaxAdmitPerTick: 2, TickMs: 100, TokenTTLSeconds: 15, SKU: "sku-rate", Stock: 1_000_000, JoinsPerSecond: 26, Prefill: 100, RateChecked: true},
			{Name: "cap", TargetActive: 8, MaxAdmitPerTick: 0, TickMs: 100, TokenTTLSeconds: 4, SKU: "sku-cap", Stock: 1_000_000, JoinsPerSecond: 5},
			{Name: "mix", TargetActive: 40, MaxAdmitPerTick: 2, TickMs: 50, TokenTTLSeconds: 10, SKU: "sku-mix", Stock: 1_000_000, JoinsPerSecond: 8},
		}
	}
	return []queueSpec{
		{Name: "rate", TargetActive: 2000, MaxAdmitPerTick: 5, TickMs: 100, TokenTTLSeconds: 15, SKU: "sku-rate", Stock: 1_000_000, JoinsPerSecond: 60, Prefill: 300, RateChecked: true},
		{Name: "cap", TargetActive: 10, MaxAdmitPerTick: 0, TickMs: 100, TokenTTLSeconds: 4, SKU: "sku-cap", Stock: 1_000_000, JoinsPerSecond: 8},
		{Name: "mix", TargetActive: 40, MaxAdmitPerTick: 2, TickMs: 50, TokenTTLSeconds: 10, SKU: "sku-mix", Stock: 1_000_000, JoinsPerSecond: 20},
	}
}

// steadyWorkload is workload's queues with every queue's demand well under
// what it admits (the fixed rate's 50/s; the slots of the other two, held
// up to their tokens' life), so their lines neither grow nor drain: the
// soak's. The fixed rate is not checked (it takes excess demand to show).
func steadyWorkload() []queueSpec {
	qs := workload(false)
	joins := map[string]float64{"rate": 30, "cap": 1, "mix": 3}
	for i := range qs {
		qs[i].JoinsPerSecond, qs[i].RateChecked = joins[qs[i].Name], false
	}
	return qs
}

// result is one scenario's outcome, written as JSON.
type result struct {
	Scenario string        `json:"scenario"`
	Seed     uint64        `json:"seed"`
	Command  string        `json:"command"`
	Injected string        `json:"injected"`
	Verdict  string        `json:"verdict"` // pass, FAIL, ERROR
	Error    string        `json:"error,omitempty"`
	Started  time.Time     `json:"started"`
	Took     string        `json:"took"`
	Timeline timeline      `json:"timeline"`
	Figures  figures       `json:"figures"`
	Checks   []checkResult `json:"checks"`
	Faults   []string      `json:"faults"` // what the journal recorded of the fault
	Queues   []queueSpec   `json:"queues"`
	Dir      string        `json:"dir,omitempty"` // where the journal and logs were kept
}

// Verdicts.
const (
	verdictPass  = "pass"
	verdictFail  = "FAIL"
	verdictError = "ERROR" // the harness could not run the scenario
)

// runEnv is what every scenario of one run shares.
type runEnv struct {
	bins   *binaries
	tmp    string // the run's temporary folder (removed at the end)
	pgTmpl string
	out    string // where results go
	quick  bool
	keep   bool
	// soak and soakReport: timing's, from -soak and -soak-report.
	soak       time.Duration
	soakReport string
	partition  time.Duration // from -partition; 0: the timing's
	progress   io.Writer
	began      time.Time
}

// say prints a progress line, stamped with the time since the run began.
func (re *runEnv) say(format string, args ...any) {
	d := time.Since(re.began).Round(time.Second)
	fmt.Fprintf(re.progress, "[%02d:%02d] "+format, append([]any{int(d.Minutes()), int(d.Seconds()) % 60}, args...)...)
}

// reproduce is the command that runs one scenario again.
func reproduce(name string, seed uint64, re *runEnv) string {
	cmd := fmt.Sprintf("go run ./tools/chaos -scenario %s -seed %d", name, seed)
	if re.quick {
		cmd += " -quick"
	}
	if re.partition > 0 {
		cmd += " -partition " + re.partition.String()
	}
	return cmd
}

func seedFor(name string, seed uint64) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() ^ seed
}

// runScenario starts a fresh stack, drives the load, injects the fault,
// lets the system settle, gathers the evidence and judges it.
func runScenario(ctx context.Context, re *runEnv, sc scenario, seed uint64) (res result) {
	started := time.Now()
	res = result{Scenario: sc.name, Seed: seed, Command: reproduce(sc.name, seed, re), Injected: sc.what, Started: started,
		Queues: workload(re.quick)}
	if sc.steady {
		res.Queues = steadyWorkload()
	}
	defer func() { res.Took = time.Since(started).Round(time.Second).String() }()
	r, err := newScenarioRun(re, sc, seed, res.Queues)
	if err != nil {
		return errored(res, err)
	}
	defer func() { r.cleanUp(&res) }()
	if err := r.openFault(); err != nil {
		return errored(res, err)
	}
	samples, settled, err := r.play(ctx)
	if err != nil {
		return errored(res, err)
	}
	if err := r.conclude(ctx, samples, settled, &res); err != nil {
		return errored(res, err)
	}
	return res
}

// scenarioRun is one scenario on a stack of its own.
type scenarioRun struct {
	re      *runEnv
	sc      scenario
	seed    uint64
	queues  []queueSpec
	dir     string // the stack's files, removed after unless -keep
	keepDir string // the journal, the result, and the logs unless it passed
	journal string // the journal's path
	s       *stack
	f       *fault // the scenario's tools: its stack, random source, journal, timeline and timing
}

// newScenarioRun makes the scenario's folders: a fresh one to keep.
func newScenarioRun(re *runEnv, sc scenario, seed uint64, queues []queueSpec) (*scenarioRun, error) {
	name := fmt.Sprintf("%s-%d", sc.name, seed)
	r := &scenarioRun{re: re, sc: sc, seed: seed, queues: queues, dir: filepath.Join(re.tmp, name), keepDir: filepath.Join(re.out, name)}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	_ = os.RemoveAll(r.keepDir)
	if err := os.MkdirAll(r.keepDir, 0o755); err != nil {
		return nil, err
	}
	r.journal = filepath.Join(r.keepDir, "journal.jsonl")
	r.s = &stack{dir: r.dir, bins: re.bins, token: "chaos-admin", queues: queues}
	return r, nil
}

// cleanUp stops the stack and keeps its logs unless the scenario passed
// (or -keep keeps everything).
func (r *scenarioRun) cleanUp(res *result) {
	r.s.close()
	if res.Verdict == verdictPass && !r.re.keep {
		_ = os.RemoveAll(filepath.Join(r.keepDir, "logs"))
	} else {
		_ = copyDir(filepath.Join(r.dir, "logs"), filepath.Join(r.keepDir, "logs"))
		res.Dir = r.keepDir
	}
	if !r.re.keep {
		_ = os.RemoveAll(r.dir)
	}
}

// openFault opens the journal and gives the fault its random source,
// seeded by the scenario and the seed, so that a seed replays the run.
func (r *scenarioRun) openFault() error {
	rng := rand.New(rand.NewPCG(seedFor(r.sc.name, r.seed), 0x6368616f73))
	j, err := openJournal(r.journal)
	if err != nil {
		return err
	}
	t := fullTiming
	if r.re.quick {
		t = quickTiming
	}
	t.soak, t.soakReport = r.re.soak, r.re.soakReport
	if r.re.partition > 0 {
		t.partition = r.re.partition
	}
	tl := &timeline{RecoverFromHeal: r.sc.recoverFromHeal, Bound: r.sc.bound, PartialRedisLoss: r.sc.partialRedisLoss}
	r.f = &fault{s: r.s, rng: rng, j: j, tl: tl, t: t}
	return nil
}

// play starts the stack, runs the load through the fault and settles;
// the journal is closed after, whatever happened.
func (r *scenarioRun) play(ctx context.Context) (samples []sample, settled settleState, err error) {
	defer func() {
		if cerr := r.f.j.close(); err == nil {
			err = cerr
		}
	}()
	var p plan
	if r.sc.prepare != nil {
		r.sc.prepare(r.f, &p)
	}
	r.re.say("%s (seed %d): starting NATS ×3, Redis ×6, PostgreSQL, pgsim, 8 services\n", r.sc.name, r.seed)
	if err := startStack(ctx, r.s, p, r.re.pgTmpl); err != nil {
		return nil, settled, fmt.Errorf("start the stack: %w", err)
	}
	if err := configure(ctx, r.s, r.queues); err != nil {
		return nil, settled, fmt.Errorf("configure queues: %w", err)
	}
	return r.drive(ctx)
}

// drive runs the load, with the sampler watching the line, through the
// fault; stops it; and pauses the queues until they settle.
func (r *scenarioRun) drive(ctx context.Context) ([]sample, settleState, error) {
	name, j, tl, t := r.sc.name, r.f.j, r.f.tl, r.f.t
	sm := startSampler(ctx, r.s, r.queues)
	defer sm.stop()
	joinCtx, stopJoins := context.WithCancel(ctx)
	shopCtx, stopShoppers := context.WithCancel(ctx)
	l := newLoad(j, r.s, r.queues, r.seed, fmt.Sprintf("u%x", r.f.rng.Uint32()))
	tl.Start = time.Now()
	l.start(joinCtx, shopCtx)
	r.re.say("%s: load running (%s)\n", name, describeLoad(r.queues))
	if err := r.injectFault(ctx, l); err != nil {
		stopJoins()
		stopShoppers()
		l.wait()
		return nil, settleState{}, err
	}
	tl.LoadStop = time.Now()
	j.add(record{Kind: recLoadStop})
	stopJoins()
	sleepCtx(ctx, t.grace)
	stopShoppers()
	l.wait()
	r.re.say("%s: load stopped (%d joins accepted, %d refused); pausing the queues and settling\n", name, l.accepted.Load(), l.failed.Load())
	// Paused queues admit nobody more, so the records gathered next are
	// one consistent picture rather than a line still moving.
	if err := pause(ctx, r.s, r.queues); err != nil {
		return nil, settleState{}, fmt.Errorf("pause the queues: %w", err)
	}
	settled := settle(ctx, r.s, r.queues, t.settle)
	r.re.say("%s: drained %v in %v; gathering the records\n", name, settled.Drained, settled.Took)
	return sm.stop(), settled, nil
}

// injectFault lets the load warm up, injects the fault and lets the load
// run on until the recovery time after the heal.
func (r *scenarioRun) injectFault(ctx context.Context, l *load) error {
	tl, t := r.f.tl, r.f.t
	if !sleepCtx(ctx, t.warm) {
		return ctx.Err()
	}
	// A fault that lands before one order has gone the whole way (a slow
	// start on a machine busy with other tests) proves nothing about
	// orders and leaves no baseline to recover to, so the warm-up lasts
	// until the load has seen an order paid, up to warmLimit more.
	if l.paid.Load() == 0 {
		start := time.Now()
		err := poll(ctx, warmLimit, "the load's first paid order", func(context.Context) error {
			if l.paid.Load() == 0 {
				return errNonePaid
			}
			return nil
		})
		r.re.say("%s: warm-up %v longer for the first paid order (seen: %v)\n", r.sc.name, time.Since(start).Round(100*time.Millisecond), err == nil)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.re.say("%s: injecting: %s\n", r.sc.name, r.sc.what)
	if err := r.sc.inject(ctx, r.f); err != nil {
		return fmt.Errorf("inject: %w", err)
	}
	if tl.Heal.IsZero() {
		tl.Heal = tl.Inject
	}
	if !sleepCtx(ctx, time.Until(tl.Heal.Add(t.after))) {
		return ctx.Err()
	}
	return nil
}

// lineSampler samples the queues' lines in the background.
type lineSampler struct {
	stopSampling context.CancelFunc
	done         chan struct{}
	mu           sync.Mutex
	samples      []sample
}

func startSampler(ctx context.Context, s *stack, queues []queueSpec) *lineSampler {
	sctx, cancel := context.WithCancel(ctx)
	ls := &lineSampler{stopSampling: cancel, done: make(chan struct{})}
	go func() { defer close(ls.done); sampler(sctx, s.rdb, queues, 100*time.Millisecond, &ls.samples, &ls.mu) }()
	return ls
}

// stop ends the sampling (once; stopping again does nothing more) and
// returns the samples.
func (ls *lineSampler) stop() []sample {
	ls.stopSampling()
	<-ls.done
	return ls.samples
}

// conclude gathers the evidence and writes the checks, the figures and the
// verdict into res, and res to result.json; the audits' full reports go
// beside it.
func (r *scenarioRun) conclude(ctx context.Context, samples []sample, settled settleState, res *result) error {
	ev := &evidence{Queues: r.queues, Samples: samples, Timeline: *r.f.tl, Settled: settled}
	if err := gather(ctx, r.s, r.journal, ev); err != nil {
		return fmt.Errorf("gather evidence: %w", err)
	}
	res.Timeline = *r.f.tl
	for _, rec := range ev.Journal {
		if rec.Kind == recFault || rec.Kind == recHeal {
			res.Faults = append(res.Faults, rec.Kind+": "+rec.Detail)
		}
	}
	// The result keeps the audits' first lines only, and a violation's
	// exceptions are what tells a real over-admission from a false alarm.
	for _, a := range ev.Audits {
		if a.Queue != "" {
			_ = os.WriteFile(filepath.Join(r.keepDir, "audit-"+a.Queue+".txt"), []byte(a.Output+a.Err), 0o644)
		}
	}
	res.Checks, res.Figures = judge(ev)
	res.Verdict = verdictPass
	for _, c := range res.Checks {
		if c.Status == statusFail {
			res.Verdict = verdictFail
		}
	}
	return writeJSON(filepath.Join(r.keepDir, "result.json"), *res)
}

func errored(res result, err error) result {
	res.Verdict, res.Error = verdictError, err.Error()
	return res
}

func describeLoad(qs []queueSpec) string {
	var parts []string
	for _, q := range qs {
		parts = append(parts, fmt.Sprintf("%s %.0f joins/s", q.Name, q.JoinsPerSecond))
	}
	return strings.Join(parts, ", ")
}

// pause sets every queue's state to paused through a gateway that answers.
func pause(ctx context.Context, s *stack, queues []queueSpec) error {
	for _, q := range queues {
		body := strings.Replace(q.adminBody(), `"state":"open"`, `"state":"paused"`, 1)
		err := poll(ctx, 30*time.Second, "pause "+q.Name, func(ctx context.Context) error {
			var last error
			for _, gw := range s.servicesOf(kindGateway) {
				if last = adminPut(ctx, s, gw.url(), "/v1/admin/queues/"+q.Name, body); last == nil {
					return nil
				}
			}
			return last
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// adminPut sends one admin PUT.
func adminPut(ctx context.Context, s *stack, base, path, body string) error {
	return adminDo(ctx, s, "PUT", base, path, body)
}

// adminDo calls the gateway's admin API as the harness's operator; any
// status from 300 on is an error quoting the answer.
func adminDo(ctx context.Context, s *stack, method, base, path, body string) error {
	req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-Admin-User", "chaos")
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: status %d: %s", method, path, res.StatusCode, b)
	}
	return nil
}

// configure sets the stock and the queues through the admin API, and
// waits until both gateways know every queue.
func configure(ctx context.Context, s *stack, queues []queueSpec) error {
	gw := s.service(kindGateway, 0).url()
	client := &http.Client{Timeout: 10 * time.Second}
	put := func(path, body string) error {
		return poll(ctx, 30*time.Second, "PUT "+path, func(ctx context.Context) error { return adminPut(ctx, s, gw, path, body) })
	}
	for _, q := range queues {
		if err := put("/v1/admin/stock/"+q.SKU, fmt.Sprintf(`{"available": %d}`, q.Stock)); err != nil {
			return err
		}
		if err := put("/v1/admin/queues/"+q.Name, q.adminBody()); err != nil {
			return err
		}
	}
	for _, sv := range s.servicesOf(kindGateway) {
		for _, q := range queues {
			err := poll(ctx, 30*time.Second, sv.name()+" knows "+q.Name, func(ctx context.Context) error {
				req, _ := http.NewRequestWithContext(ctx, "GET", sv.url()+"/v1/admin/queues/"+q.Name, nil)
				req.Header.Set("Authorization", "Bearer "+s.token)
				res, err := client.Do(req)
				if err != nil {
					return err
				}
				res.Body.Close()
				if res.StatusCode != 200 {
					return fmt.Errorf("status %d", res.StatusCode)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// settle waits, up to within, until nothing is in flight: every join and
// order request consumed and acknowledged, every outbox announced, no
// order PENDING.
func settle(ctx context.Context, s *stack, queues []queueSpec, within time.Duration) settleState {
	start := time.Now()
	var detail string
	err := poll(ctx, within, "the pipeline to drain", func(ctx context.Context) error {
		var busy []string
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		for _, st := range []string{event.StreamEntries, event.StreamOrders} {
			n, err := consumersInFlight(cctx, s.js, st)
			if err != nil {
				busy = append(busy, fmt.Sprintf("%s consumers: %v", st, err))
			} else if n > 0 {
				busy = append(busy, fmt.Sprintf("%d messages of %s not consumed", n, st))
			}
		}
		for _, q := range queues {
			n, err := s.rdb.ZCard(cctx, keyspace.Of(q.Name).Outbox()).Result()
			if err != nil {
				busy = append(busy, fmt.Sprintf("outbox of %s: %v", q.Name, err))
			} else if n > 0 {
				busy = append(busy, fmt.Sprintf("%d admissions of %s not announced", n, q.Name))
			}
		}
		if conn, err := pgx.Connect(cctx, s.pg.url); err != nil {
			busy = append(busy, "PostgreSQL: "+err.Error())
		} else {
			var n int
			if err := conn.QueryRow(cctx, "SELECT count(*) FROM orders WHERE status = 'PENDING'").Scan(&n); err != nil {
				busy = append(busy, "PostgreSQL: "+err.Error())
			} else if n > 0 {
				busy = append(busy, fmt.Sprintf("%d orders PENDING", n))
			}
			conn.Close(cctx)
		}
		detail = strings.Join(busy, "; ")
		if len(busy) > 0 {
			return errors.New(detail)
		}
		return nil
	})
	return settleState{Drained: err == nil, Took: time.Since(start).Round(100 * time.Millisecond), Detail: detailIf(err, detail)}
}

func detailIf(err error, detail string) string {
	if err == nil {
		return ""
	}
	return detail
}

// gather reads every record the checks judge.
func gather(ctx context.Context, s *stack, jpath string, ev *evidence) error {
	var err error
	if ev.Journal, err = readJournal(jpath); err != nil {
		return err
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := gatherStreams(gctx, s.js, ev); err != nil {
		return err
	}
	if err := gatherRedis(gctx, s.rdb, ev); err != nil {
		ev.RedisErr = err.Error()
	}
	if err := gatherPostgres(gctx, s.pg.url, ev); err != nil {
		ev.DBErr = err.Error()
	} else if err := gatherRecords(gctx, s.rdb, ev); err != nil {
		ev.RecordsErr = err.Error()
	}
	if err := gatherPgsim(gctx, s.pgsimURL, s.token, ev); err != nil {
		ev.PgsimErr = err.Error()
	}
	ev.Audits = make([]auditResult, len(ev.Queues))
	var wg sync.WaitGroup
	for i, q := range ev.Queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev.Audits[i] = audit(gctx, s, q.Name)
		}()
	}
	wg.Wait()
	return nil
}

// audit runs usherctl audit on a queue.
func audit(ctx context.Context, s *stack, q string) auditResult {
	cmd := exec.CommandContext(ctx, s.bins.usherctl, "audit", "--queue", q, "--show", "10")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "USHER_NATS_URL=" + s.natsURLs(), "USHER_REDIS_URL=" + s.redisSeeds(),
		"USHER_ADMIN_TOKEN=" + s.token, "USHER_GATEWAY_URL=" + s.service(kindGateway, 0).url()}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := auditResult{Queue: q, Clean: err == nil, Output: out.String()}
	if err != nil {
		r.Err = strings.TrimSpace(errb.String())
		if r.Err == "" {
			r.Err = err.Error()
		}
	}
	return r
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// copyDir copies the files of src (not recursive) into dst.
func copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
