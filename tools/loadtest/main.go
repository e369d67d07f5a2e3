// Command loadtest drives a running usher over loopback and reports what it
// measured: throughput, latency percentiles per step, status codes, and the
// invariants checked after the run (lost shoppers, over-admission).
//
// Arrivals are open-loop: requests start on a schedule, not when the last
// one finished, and latency counts from the scheduled start, so a stalled
// server shows up as latency instead of hiding as a lower rate (no
// coordinated omission). Every run is bounded in time and count.
//
//	loadtest -scenario steady -rate 5000 -duration 20s
//	loadtest -scenario spike  -rate 10000 -duration 30s   (100/s → rate, then hold)
//	loadtest -scenario overload -rate 10000 -duration 10s (rate, 3 × rate, rate; p99 per status)
//	loadtest -scenario poll    -shoppers 10000 -duration 15s    (as fast as -conns allow)
//	loadtest -scenario paced   -shoppers 10000 -duration 30s    (polling at pollAfterMs)
//	loadtest -scenario sse     -shoppers 19000 -max-admit-per-tick 0 -duration 90s (READY delivery latency)
//	loadtest -scenario journey -vus 20 -duration 60s            (join → READY → order)
//	loadtest -scenario journey -vus 300 -adaptive 5:160 -pgsim-schedule 20s=slow:1000,50s=normal
//	loadtest -scenario batch   -shoppers 500 -max-admit-per-tick 14
//	loadtest -scenario drop    -shoppers 5000 -stock 500 -target-active 20 [-stock-aware=false]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == anchorServerArg {
		os.Exit(anchorServer(os.Stdin, os.Stdout))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	scenario   string
	gateway    string
	adminToken string
	queue      string
	rate       int
	duration   time.Duration
	shoppers   int
	conns      int
	out        string
	report     string

	notifier           string
	orderworkerMetrics string
	vus                int
	sku                string
	stock              int
	targetActive       int
	maxAdmitPerTick    int
	keepRateLimits     bool
	wait               string
	cpuProfile         string

	adaptive      string       // "min:max": the queue's targetActive is adaptive (journey)
	pgsim         string       // pgsim's base URL, for -pgsim-schedule
	pgsimToken    string       // pgsim's admin token
	pgsimSchedule string       // "20s=slow:1000,50s=normal"
	schedule      []modeChange // parsed -pgsim-schedule

	stockAware bool   // the drop's queue follows its stock (drop)
	lateJoins  int    // joins of new shoppers after the sale (drop)
	natsURL    string // loopback NATS to read the drop's events from ("" = don't)
	natsNKey   string // NKey seed file for -nats
	anchor     bool   // measure the drop's SSE broadcast anchor
}

// queueConfig completes a queue configuration for a run. All of the load
// comes from one address, so the per-IP limits (and the per-queue order
// cap) that protect a real sale would measure the limiter, not the line:
// they are off unless -keep-rate-limits.
func (o options) queueConfig(cfg map[string]any) map[string]any {
	if !o.keepRateLimits {
		cfg["rateLimit"] = map[string]int{"perIpPerSecond": 0, "perIpBurst": 0, "perUserPerSecond": 0, "perUserBurst": 0, "ordersPerSecond": 0}
	}
	return cfg
}

func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.scenario, "scenario", "steady", "steady | spike | overload | poll | paced | sse | journey | batch | drop")
	fs.StringVar(&o.gateway, "gateway", envOr("USHER_GATEWAY_URL", "http://127.0.0.1:8080"), "gateway base URL (loopback only)")
	fs.StringVar(&o.adminToken, "admin-token", envOr("USHER_ADMIN_TOKEN", "dev-admin-token"), "admin token of the gateway")
	fs.StringVar(&o.queue, "queue", "", "queue to use (default: a new one per run)")
	fs.IntVar(&o.rate, "rate", 5000, "joins per second to reach (steady, spike; overload: the rate the stack answers)")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "how long to send (bounded: at most 10m)")
	fs.IntVar(&o.shoppers, "shoppers", 10000, "shoppers in line (poll, paced, sse, batch; drop: 5000)")
	fs.IntVar(&o.conns, "conns", 256, "HTTP connections to the gateway")
	fs.StringVar(&o.notifier, "notifier", envOr("USHER_NOTIFIER_URL", "http://127.0.0.1:8081"), "notifier base URL (sse)")
	fs.StringVar(&o.orderworkerMetrics, "orderworker-metrics", "http://127.0.0.1:8083/metrics", "the order worker's /metrics, for DB connection hold times (journey, batch)")
	fs.StringVar(&o.wait, "wait", "sse", "how a journey waits for READY: sse | poll (journey)")
	fs.IntVar(&o.vus, "vus", 20, "virtual users walking journeys back to back (journey)")
	fs.StringVar(&o.sku, "sku", "", "SKU the run's queue sells (journey, batch; default: one per run)")
	fs.IntVar(&o.stock, "stock", 1_000_000, "units of the SKU in stock (journey, batch; drop: 500)")
	fs.IntVar(&o.targetActive, "target-active", 20, "the queue's targetActive (journey, batch)")
	fs.IntVar(&o.maxAdmitPerTick, "max-admit-per-tick", 14, "the queue's maxAdmitPerTick (journey, batch, sse; 0 = no cap)")
	fs.BoolVar(&o.keepRateLimits, "keep-rate-limits", false, "keep the queue's default rate limits (all load comes from one IP)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the load tool's own CPU profile here")
	fs.StringVar(&o.adaptive, "adaptive", "", "min:max — the queue's targetActive is adaptive within these bounds, starting at -target-active (journey)")
	fs.StringVar(&o.pgsim, "pgsim", envOr("PGSIM_URL", "http://127.0.0.1:8090"), "pgsim's base URL (loopback only), for -pgsim-schedule")
	fs.StringVar(&o.pgsimToken, "pgsim-token", envOr("PGSIM_ADMIN_TOKEN", "dev-admin-token"), "pgsim's admin token")
	fs.StringVar(&o.pgsimSchedule, "pgsim-schedule", "", "pgsim modes during the run, e.g. 20s=slow:1000,50s=normal (journey; back to normal at the end)")
	fs.BoolVar(&o.stockAware, "stock-aware", true, "the queue admits against its stock (drop; false: the comparison run)")
	fs.IntVar(&o.lateJoins, "late-joins", 100, "new shoppers joining after the sale, each expected to get 410 (drop)")
	fs.StringVar(&o.natsURL, "nats", "", "loopback NATS URL to read the order.completed and sold-out close events from (drop; empty: the load tool's own times)")
	fs.StringVar(&o.natsNKey, "nats-nkey", "", "NKey seed file for -nats on a broker with authentication (make run: .usher/nats/usherctl.nk)")
	fs.BoolVar(&o.anchor, "anchor", true, "measure the anchor: a bare SSE server telling as many streams one event (drop), or holding as many idle streams (sse: its memory per stream)")
	fs.StringVar(&o.out, "out", "", "write the JSON result here")
	fs.StringVar(&o.report, "report", "", "write an HTML report with charts here")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.scenario == "drop" {
		for name, v := range map[string]*int{"shoppers": &o.shoppers, "stock": &o.stock} {
			if !set[name] {
				*v = map[string]int{"shoppers": dropShoppers, "stock": dropUnits}[name]
			}
		}
		if !set["duration"] {
			o.duration = dropDuration
		}
		if o.stock < 1 || o.lateJoins < 0 || o.lateJoins > 100_000 {
			return o, fmt.Errorf("drop: -stock ≥ 1 and -late-joins in [0, 1e5], please")
		}
	}
	if o.duration <= 0 || o.duration > 10*time.Minute {
		return o, fmt.Errorf("-duration %v: want (0, 10m]", o.duration)
	}
	if o.queue == "" {
		o.queue = fmt.Sprintf("lt-%d", time.Now().UnixNano()%1e12)
	}
	if _, _, err := adaptiveBounds(o.adaptive); err != nil {
		return o, err
	}
	var err error
	if o.schedule, err = parseSchedule(o.pgsimSchedule); err != nil {
		return o, err
	}
	if o.wait != "sse" && o.wait != "poll" {
		return o, fmt.Errorf("-wait %q: want sse or poll", o.wait)
	}
	if o.sku == "" {
		o.sku = o.queue + "-sku"
	}
	if o.shoppers < 1 || o.shoppers > 1_000_000 || o.vus < 1 || o.vus > 10_000 {
		return o, fmt.Errorf("-shoppers in [1, 1e6] and -vus in [1, 1e4], please")
	}
	return o, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	c, err := newClient(o.gateway, o.adminToken, o.conns)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var res result
	switch o.scenario {
	case "steady":
		res, err = joins(ctx, c, o, steady(o.rate, o.duration), stderr)
	case "spike":
		res, err = joins(ctx, c, o, spike(o.rate, o.duration), stderr)
	case "overload":
		res, err = joins(ctx, c, o, overload(o.rate, o.duration), stderr)
	case "poll":
		res, err = polls(ctx, c, o, stderr)
	case "paced":
		res, err = paced(ctx, c, o, stderr)
	case "sse":
		res, err = sseScenario(ctx, c, o, stderr)
	case "journey":
		res, err = journey(ctx, c, o, stderr)
	case "batch":
		res, err = batch(ctx, c, o, stderr)
	case "drop":
		res, err = drop(ctx, c, o, stderr)
	default:
		return fmt.Errorf("-scenario %q: want steady, spike, poll, paced, sse, journey, batch or drop", o.scenario)
	}
	if err != nil {
		return err
	}
	res.print(stdout)
	if o.out != "" {
		if err := res.save(o.out); err != nil {
			return err
		}
	}
	if o.report != "" {
		return writeReport(o.report, res)
	}
	return nil
}
