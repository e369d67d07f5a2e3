package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The soak: no fault, the suite's load for as long as -soak says (an hour
// for the published figures), with the churn a long sale has — joins,
// leaves, abandonment, orders, SSE streams ending and reconnecting, and
// every few minutes a queue created, joined, restocked and deleted. Every
// process's RSS, goroutines and open files, Redis's memory and keys and
// the streams' size are sampled throughout; after a warm-up quarter, the
// slope of each (least squares) with its 95 % interval says whether it
// is flat. The suite's checks (nothing lost, nobody twice, audit) judge
// the run as they judge every scenario.

// soakEvery is how often the soak samples, and soakChurnEvery how often
// it creates and deletes a queue.
const (
	soakEvery      = 10 * time.Second
	soakChurnEvery = 2 * time.Minute
)

// series is one sampled figure: seconds since the start, and values.
type series struct {
	t, v []float64
}

func (s *series) add(at, v float64) { s.t, s.v = append(s.t, at), append(s.v, v) }

// soakPlan keeps a finished shopper's records for two minutes, not an
// hour: a soak shorter than the tombstones' life would see them pile up
// by design, and call it growth. And it samples the services' heaps every
// 16 KiB allocated, not every 512 KiB: a service's live heap is 3–7 MiB,
// a dozen samples at Go's default rate, too few for the profiles kept
// after the warm-up and at the end to show where a MiB an hour goes.
func soakPlan(_ *fault, p *plan) {
	p.env = map[string]string{"USHER_TOMBSTONE_TTL": "2m", "GODEBUG": "memprofilerate=16384"}
}

// soak runs the load for f.t.soak, sampling and churning, then reports.
func soak(ctx context.Context, f *fault) error {
	d := f.t.soak
	if d <= 0 {
		d = 10 * time.Minute
	}
	f.injected("soak: the load for %s with churn (a queue created and deleted every %s), every process sampled each %s", d, soakChurnEvery, soakEvery)
	all := map[string]*series{}
	sample := func(at float64) {
		for name, v := range f.s.soakSample(ctx) {
			s := all[name]
			if s == nil {
				s = &series{}
				all[name] = s
			}
			s.add(at, v)
		}
	}
	start := time.Now()
	sampleT := time.NewTicker(soakEvery)
	churnT := time.NewTicker(soakChurnEvery)
	defer sampleT.Stop()
	defer churnT.Stop()
	done := time.After(d)
	warm := time.After(d / 4)
	churned := 0
	sample(0)
loop:
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			break loop
		case <-warm:
			f.s.saveHeaps(ctx, "warm")
		case <-sampleT.C:
			sample(time.Since(start).Seconds())
		case <-churnT.C:
			churned++
			if err := f.s.churnQueue(ctx, churned); err != nil {
				f.j.add(record{Kind: recFault, Detail: "soak: churn: " + err.Error()})
			}
		}
	}
	sample(time.Since(start).Seconds())
	if dir := f.s.saveHeaps(ctx, "end"); dir != "" {
		f.j.add(record{Kind: recFault, Detail: "soak: heap profiles after the warm-up and at the end in " + dir +
			"; what grew: go tool pprof -top -sample_index=inuse_space -diff_base " + dir + "/gateway-1-warm.pb.gz " + dir + "/gateway-1-end.pb.gz"})
	}
	table := soakTable(all, d, churned)
	f.healed("soak over after %s: %d queues created and deleted", d, churned)
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		f.j.add(record{Kind: recFault, Detail: "soak: " + line})
	}
	if f.t.soakReport != "" {
		return writeSoakBlock(f.t.soakReport, table)
	}
	return nil
}

// The soak's two counts of Redis keys. Those without a TTL are the live
// state (queues, waiting and admitted entries, live users' pointers) and
// must be flat; those with one include what is kept for a set time by
// design — order records and their counted markers for a day, bought
// counts for a week — and grow until that time has passed, longer than
// any soak.
const (
	keysLive     = "redis keys without a TTL (masters)"
	keysExpiring = "redis keys with a TTL (masters)"
	memoryMiB    = "redis used memory MiB (masters)"
)

// soakSample reads every figure the soak follows.
func (s *stack) soakSample(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	procs := map[string]*proc{}
	for _, sv := range s.services {
		procs[sv.name()] = sv.proc
		m := scrapeSums(ctx, sv.url()+"/metrics", "go_goroutines", "go_gc_heap_live_bytes", "usher_redis_pool_connections")
		if g, ok := m["go_goroutines"]; ok {
			out[sv.name()+" goroutines"] = g
		}
		// The live heap beside the RSS: a live heap flat under a growing
		// RSS is the runtime keeping pages, a growing one is something
		// kept. (Not the heap in use, which also holds the garbage of the
		// collector's current cycle: its samples rise and fall with when
		// they are taken.)
		if h, ok := m["go_gc_heap_live_bytes"]; ok {
			out[sv.name()+" live heap MiB"] = h / (1 << 20)
		}
		// Beside the open files: the connections its Redis pools hold.
		if c, ok := m["usher_redis_pool_connections"]; ok {
			out[sv.name()+" redis connections (pools)"] = c
		}
	}
	for _, n := range s.nats {
		procs["nats-"+n.name] = n.proc
	}
	for i, n := range s.redis {
		procs[fmt.Sprintf("redis-%d", i+1)] = n.proc
	}
	for name, p := range procs {
		pid := p.pid()
		if pid == 0 {
			continue
		}
		if kb, ok := statusKB(pid, "VmRSS:"); ok {
			out[name+" RSS MiB"] = kb / 1024
		}
		if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
			out[name+" open files"] = float64(len(fds))
		}
	}
	var mem, keys, expiring float64
	_ = s.rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory", "keyspace").Result()
		if err != nil {
			return nil
		}
		if v, ok := infoField(info, "used_memory"); ok {
			mem += v
		}
		n, x := keyspaceCounts(info)
		keys, expiring = keys+n, expiring+x
		return nil
	})
	out[memoryMiB] = mem / (1 << 20)
	out[keysLive] = keys - expiring
	out[keysExpiring] = expiring
	for name := range s.js.StreamNames(ctx).Name() {
		st, err := s.js.Stream(ctx, name)
		if err != nil {
			continue
		}
		if info, err := st.Info(ctx); err == nil {
			kept := "no age limit"
			if info.Config.MaxAge > 0 {
				kept = "kept " + info.Config.MaxAge.String()
			}
			out["stream "+name+" MiB ("+kept+")"] = float64(info.State.Bytes) / (1 << 20)
		}
	}
	return out
}

// soakProfiles is where the soak keeps the services' heap profiles.
const soakProfiles = ".usher/soak"

// saveHeaps saves every service's heap profile, just after a collection,
// as <name>-<at>.pb.gz in soakProfiles and returns that folder ("" when it
// could not be made).
func (s *stack) saveHeaps(ctx context.Context, at string) string {
	if err := os.MkdirAll(soakProfiles, 0o755); err != nil {
		return ""
	}
	client := &http.Client{Timeout: 30 * time.Second}
	for _, sv := range s.services {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+sv.profiles+"/debug/pprof/heap?gc=1", nil)
		res, err := client.Do(req)
		if err != nil {
			continue
		}
		if res.StatusCode == http.StatusOK {
			if b, err := io.ReadAll(res.Body); err == nil {
				_ = os.WriteFile(filepath.Join(soakProfiles, sv.name()+"-"+at+".pb.gz"), b, 0o644)
			}
		}
		res.Body.Close()
	}
	return soakProfiles
}

// churnQueue creates queue soak-n on a SKU of its own, joins it, restocks
// the SKU, closes the queue and deletes it once its admitted shoppers'
// slots have ended: the life of a short drop.
func (s *stack) churnQueue(ctx context.Context, n int) error {
	gw := s.service(kindGateway, 0).url()
	q := fmt.Sprintf("soak-%d", n)
	if err := adminPut(ctx, s, gw, "/v1/admin/stock/soak-sku", `{"available": 1000}`); err != nil {
		return err
	}
	body := `{"targetActive": 5, "state": "open", "tickMs": 100, "tokenTtlSeconds": 5, "sku": "soak-sku"}`
	if err := poll(ctx, 30*time.Second, "PUT queue "+q, func(ctx context.Context) error { return adminPut(ctx, s, gw, "/v1/admin/queues/"+q, body) }); err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 50 {
		req, _ := http.NewRequestWithContext(ctx, "POST", gw+"/v1/queues/"+q+"/tickets", nil)
		req.Header.Set("X-User-Id", fmt.Sprintf("soak-%d-%d", n, i))
		if res, err := client.Do(req); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	if err := adminPut(ctx, s, gw, "/v1/admin/stock/soak-sku", `{"available": 2000}`); err != nil {
		return err
	}
	closed := strings.Replace(body, `"state": "open"`, `"state": "closed"`, 1)
	if err := adminPut(ctx, s, gw, "/v1/admin/queues/"+q, closed); err != nil {
		return err
	}
	// 409 until an admitter has seen it closed and its slots have ended
	// (tokenTtlSeconds 5).
	return poll(ctx, 30*time.Second, "DELETE queue "+q, func(ctx context.Context) error {
		return adminDo(ctx, s, "DELETE", gw, "/v1/admin/queues/"+q, "")
	})
}

// soakTable is the slope of every series after the first quarter (the
// warm-up), per hour, with its 95 % interval and as a share of the
// series' mean: "flat" when the interval holds 0 or the hour's change is
// under 5 % of the mean.
func soakTable(all map[string]*series, d time.Duration, churned int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Soak of %s (%d queues created and deleted; samples every %s; slopes after the first quarter):\n\n", d.Round(time.Second), churned, soakEvery)
	b.WriteString("| figure | mean | slope per hour (95 %) | per hour, of the mean | verdict |\n| --- | ---: | ---: | ---: | --- |\n")
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	slopes := map[string]float64{}
	for _, n := range names {
		s := all[n]
		cut := len(s.t) / 4
		t, v := s.t[cut:], s.v[cut:]
		slope, ci, mean := fitSlope(t, v)
		rel := 0.0
		if mean != 0 {
			rel = slope * 3600 / mean * 100
		}
		verdict := "flat"
		if math.Abs(slope)*3600 > 0.05*math.Abs(mean) && (slope-ci > 0 || slope+ci < 0) {
			verdict = "grows"
			if slope < 0 {
				verdict = "falls"
			}
			if strings.HasPrefix(n, "stream ") && slope > 0 {
				verdict = "grows: the record, until its retention"
			}
			if n == keysExpiring && slope > 0 {
				verdict = "grows: records kept for their TTL (a day, a week)"
			}
		}
		fmt.Fprintf(&b, "| %s | %.1f | %+.2f ± %.2f | %+.1f %% | %s |\n", n, mean, slope*3600, ci*3600, rel, verdict)
		slopes[n] = slope
	}
	// Whether Redis's memory grew by the kept records or by more: its
	// growth per key with a TTL is a record's size when they explain it.
	if mem, kept := slopes[memoryMiB], slopes[keysExpiring]; mem > 0 && kept > 0 {
		fmt.Fprintf(&b, "\nRedis's memory grew %.1f MiB an hour while keys with a TTL grew %.0f: %.0f bytes a key.\n",
			mem*3600, kept*3600, mem*(1<<20)/kept)
	}
	return b.String()
}

// fitSlope is the least-squares slope of v over t (per second), its 95 %
// interval's half width, and v's mean.
func fitSlope(t, v []float64) (slope, ci, mean float64) {
	n := float64(len(t))
	if n < 3 {
		return 0, 0, avg(v)
	}
	mt, mv := avg(t), avg(v)
	var sxx, sxy float64
	for i := range t {
		sxx += (t[i] - mt) * (t[i] - mt)
		sxy += (t[i] - mt) * (v[i] - mv)
	}
	if sxx == 0 {
		return 0, 0, mv
	}
	slope = sxy / sxx
	var sse float64
	for i := range t {
		r := v[i] - (mv + slope*(t[i]-mt))
		sse += r * r
	}
	se := math.Sqrt(sse / (n - 2) / sxx)
	return slope, 1.96 * se, mv
}

func avg(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// writeSoakBlock puts the soak's table in path between the soak markers,
// replacing the last one (make chaos keeps the block when it rewrites
// the file).
func writeSoakBlock(path, table string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	rest, _ := cutBlock(string(old), "soak")
	block := soakBegin + "\n## Soak\n\nWritten by `make soak` (`go run ./tools/chaos -scenario soak -soak DURATION -soak-report " +
		path + "`) on " + time.Now().UTC().Format("2006-01-02 15:04 UTC") + ".\n\n" + table + "<!-- /soak -->\n"
	return os.WriteFile(path, []byte(strings.TrimRight(rest, "\n")+"\n\n"+block), 0o644)
}

const soakBegin = "<!-- soak: written by make soak -->"

// keptBlocks are the parts of RELIABILITY.md other runs write, which make
// chaos keeps when it rewrites the file: the soak's (make soak) and
// overload's (make bench's overload goal, scripts/bench-goals.sh).
var keptBlocks = []string{"soak", "overload"}

// cutBlock splits a file into what is not the block called name — from
// "<!-- name:" to "<!-- /name -->" — and the block ("" when there is none).
func cutBlock(s, name string) (rest, block string) {
	end := "<!-- /" + name + " -->"
	i := strings.Index(s, "<!-- "+name+":")
	j := strings.Index(s, end)
	if i < 0 || j < i {
		return s, ""
	}
	j += len(end)
	return s[:i] + strings.TrimLeft(s[j:], "\n"), s[i:j]
}

// scrapeSums reads a Prometheus page and sums each named family over its
// label sets; a family the page lacks is absent.
func scrapeSums(ctx context.Context, url string, names ...string) map[string]float64 {
	out := map[string]float64{}
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	res, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return out
	}
	defer res.Body.Close()
	return sumFamilies(res.Body, names...)
}

// sumFamilies sums each named family of a Prometheus text page over its
// label sets.
func sumFamilies(r io.Reader, names ...string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, n := range names {
			rest, ok := strings.CutPrefix(line, n)
			if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
				continue
			}
			if i := strings.LastIndexByte(rest, ' '); i >= 0 {
				if v, err := strconv.ParseFloat(rest[i+1:], 64); err == nil {
					out[n] += v
				}
			}
		}
	}
	return out
}

// statusKB reads a "Name:  N kB" line of /proc/pid/status.
func statusKB(pid int, field string) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// infoField reads a numeric field of Redis's INFO.
// keyspaceCounts sums INFO keyspace's keys and keys with a TTL over the
// databases ("db0:keys=12,expires=3,avg_ttl=0").
func keyspaceCounts(info string) (keys, expires float64) {
	for _, l := range strings.Split(info, "\n") {
		_, kv, ok := strings.Cut(strings.TrimSpace(l), ":keys=")
		if !ok {
			continue
		}
		for i, f := range strings.Split("keys="+kv, ",") {
			name, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseFloat(v, 64)
			switch {
			case i == 0 && name == "keys":
				keys += n
			case name == "expires":
				expires += n
			}
		}
	}
	return keys, expires
}

func infoField(info, name string) (float64, bool) {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+":"); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}
