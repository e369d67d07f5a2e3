package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/event"
	"usher/internal/testenv"
)

// A stalled, killed or restarted admitter must delay admission by
// seconds after it (or a peer) can work again, in every queue — never by
// JetStream's 30 s ack wait.
const (
	// livenessBound is how late after an admitter could admit it a join may
	// be admitted. The requirement is about 2 s; 6 s leaves room for a
	// loaded machine and still tells it from a wait for the ack wait (~30 s).
	livenessBound = 6 * time.Second
	// livenessPatience is how long the test waits for the last join before
	// it gives up: long enough to measure an ack-wait stall instead of only
	// reporting it. A passing run never waits for it.
	livenessPatience = 40 * time.Second
	// joinEvery paces the trickle: 20 joins a second into each queue.
	joinEvery = 50 * time.Millisecond
	// peerFreeze is how long one of two admitters is frozen. It is longer
	// than livenessBound, so a peer held up only for the freeze (not for
	// the ack wait) fails too: with 3 s, that stall would pass unnoticed.
	peerFreeze = 10 * time.Second
	// afterFault is how many joins each queue gets once an admitter can
	// work again (3 s of trickle), so the figures include steady state.
	afterFault = 60
)

// TestLivenessUnderAdmitterFaults injects each admitter fault into a running
// stack with two queues under a steady trickle of joins, and measures for
// every join waiting at or made after the fault how long after "an admitter
// could admit it" it was admitted. Admission times are the times
// USHER_ADMISSIONS stored the events.
func TestLivenessUnderAdmitterFaults(t *testing.T) {
	t.Parallel()
	t.Logf("| fault | admitters | queue | joins | max gap | p50 gap | longest silence | never admitted |")
	t.Run("no fault", func(t *testing.T) {
		// The control: with a healthy admitter a join is admitted within a fraction of a second.
		r := newLivenessRig(t, 1)
		r.run(t, "none (control)", func(faultAt time.Time) time.Time { return faultAt })
	})
	t.Run("one admitter frozen 3s", func(t *testing.T) {
		// A frozen admitter admits everyone within seconds of thawing, in every queue.
		r := newLivenessRig(t, 1)
		r.run(t, "SIGSTOP 3 s, SIGCONT", func(time.Time) time.Time {
			r.admitters[0].signal(t, syscall.SIGSTOP)
			time.Sleep(3 * time.Second) // the fault itself: a 3 s freeze (GC pause, swapped-out VM, debugger)
			r.admitters[0].signal(t, syscall.SIGCONT)
			return time.Now()
		})
	})
	t.Run("one admitter killed and restarted", func(t *testing.T) {
		// A restarted admitter admits everyone within seconds of being ready, in every queue.
		r := newLivenessRig(t, 1)
		r.run(t, "kill -9, restart", func(time.Time) time.Time {
			r.admitters[0].kill(t)
			r.admitters[0] = r.startAdmitter(t)
			return time.Now()
		})
	})
	t.Run("two admitters one frozen 10s", func(t *testing.T) {
		// While one admitter is frozen, the other keeps admitting in every queue.
		r := newLivenessRig(t, 2)
		r.run(t, "SIGSTOP one 10 s, SIGCONT", func(faultAt time.Time) time.Time {
			r.admitters[0].signal(t, syscall.SIGSTOP)
			time.Sleep(peerFreeze) // the fault itself, as above
			r.admitters[0].signal(t, syscall.SIGCONT)
			return faultAt
		})
	})
	t.Run("two admitters one killed", func(t *testing.T) {
		// When one admitter dies, the other admits everyone within seconds, in every queue.
		r := newLivenessRig(t, 2)
		r.run(t, "kill -9 one", func(faultAt time.Time) time.Time {
			r.admitters[0].kill(t)
			return faultAt
		})
	})
}

// livenessRig is a gateway, n admitters, two open queues (A and B) with room
// for everyone, and a follower of their admissions.
type livenessRig struct {
	env       map[string]string
	base      string
	queues    []string // A, B
	admitters []*admitterProc
	admitted  *admissionLog
}

// admitterProc is a running admitter and where its /readyz answers.
type admitterProc struct {
	*service
	url string
}

func newLivenessRig(t *testing.T, admitters int) *livenessRig {
	t.Helper()
	natsURL := testenv.NATS(t) // a server per subtest: the shared consumer's state never leaks between faults
	gw := addr(t)
	r := &livenessRig{
		env: map[string]string{
			"USHER_NATS_URL":     natsURL,
			"USHER_REDIS_URL":    ownRedis(t),
			"USHER_DATA_DIR":     t.TempDir(),
			"USHER_GATEWAY_ADDR": gw,
			"USHER_ADMIN_TOKEN":  "e2e-admin",
		},
		base: "http://" + gw,
	}
	gwEnv := withEnv(r.env, "USHER_LOG_LEVEL", "warn") // its output is printed on failure: keep it to what went wrong
	start(t, "gateway", gwEnv)
	waitReady(t, 30*time.Second, r.base)
	for range admitters {
		r.admitters = append(r.admitters, r.startAdmitter(t))
	}
	name := testenv.Name(t)
	r.queues = []string{name + "-a", name + "-b"}
	admin := map[string]string{"Authorization": "Bearer e2e-admin"}
	for _, q := range r.queues {
		// Room for everyone (targetActive far above the joins) and no rate
		// limit: only the admitter decides when a join is admitted.
		body := `{"targetActive": 100000, "tickMs": 50, "tokenTtlSeconds": 300, "state": "open",
			"rateLimit": {"perIpPerSecond": 0, "perIpBurst": 0, "perUserPerSecond": 0, "perUserBurst": 0, "ordersPerSecond": 0}}`
		if code, res := call(t, "PUT", r.base+"/v1/admin/queues/"+q, body, admin); code != 201 {
			t.Fatalf("PUT queue %s = %d %v, want 201", q, code, res)
		}
	}
	r.admitted = followAdmissions(t, natsURL, r.queues)
	return r
}

// startAdmitter starts an admitter on a fresh port and waits until it is
// ready: connected, its consumer declared, its catalog loaded.
func (r *livenessRig) startAdmitter(t *testing.T) *admitterProc {
	t.Helper()
	a := addr(t)
	p := &admitterProc{service: start(t, "admitter", withEnv(r.env, "USHER_ADMITTER_ADDR", a)), url: "http://" + a}
	waitReady(t, 30*time.Second, p.url)
	return p
}

// withEnv returns a copy of env with k set to v.
func withEnv(env map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(env)+1)
	for ek, ev := range env {
		out[ek] = ev
	}
	out[k] = v
	return out
}

// signal sends sig to the service's process.
func (s *service) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", s.name, sig, err)
	}
}

// kill ends the process with SIGKILL, as an OOM killer or a lost node
// would, and waits until it is gone.
func (s *service) kill(t *testing.T) {
	t.Helper()
	s.signal(t, syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still running 10s after SIGKILL", s.name)
	}
}

// run drives one fault: a steady trickle into both queues, the fault once
// admission is flowing, the trickle on for afterFault joins per queue once
// inject says an admitter can work again, then the figures and the verdict.
// inject gets the fault's start and returns when an admitter could admit
// again.
func (r *livenessRig) run(t *testing.T, fault string, inject func(faultAt time.Time) (ableAt time.Time)) {
	t.Helper()
	tr := startTrickle(t, r.base, r.queues)
	testenv.Eventually(t, 20*time.Second, func() bool {
		return r.admitted.count(r.queues[0]) >= 10 && r.admitted.count(r.queues[1]) >= 10
	}, "ten admissions in each queue before the fault")

	faultAt := time.Now()
	ableAt := inject(faultAt)
	testenv.Eventually(t, 30*time.Second, func() bool {
		return tr.since(r.queues[0], ableAt) >= afterFault && tr.since(r.queues[1], ableAt) >= afterFault
	}, "%d joins in each queue after the fault", afterFault)
	tr.stop()
	if errs := tr.errors(); len(errs) > 0 {
		t.Fatalf("joins failed during the run (%d), first: %s", len(errs), errs[0])
	}

	// Wait until every join is admitted, or long enough to be sure the
	// rest are stuck behind an ack wait.
	giveUp := tr.last().Add(livenessPatience)
	for !r.admitted.all(tr) && time.Now().Before(giveUp) {
		time.Sleep(20 * time.Millisecond)
	}
	end := time.Now()

	admitters := len(r.admitters)
	for i, q := range r.queues {
		label := string(rune('A' + i))
		f := measure(tr.joins(q), r.admitted.of(q), faultAt, ableAt, end)
		t.Logf("| %s | %d | %s | %d | %s | %s | %s | %d |", fault, admitters, label, f.joins,
			secs(f.maxGap), secs(f.p50), secs(f.silence), f.notAdmitted)
		if f.late > 0 {
			w := f.worst
			admittedAt := "never admitted (the test gave up at " + rel(end, faultAt) + ")"
			if !w.admittedAt.IsZero() {
				admittedAt = "admitted at " + rel(w.admittedAt, faultAt)
			}
			t.Errorf("queue %s (%s), fault %q with %d admitter(s): %d of %d joins waiting at or made after the fault were admitted "+
				"more than %v after an admitter could admit them (%d never); worst: user %s joined at %s (fault at +0.00s, "+
				"admitters able from %s), %s: got %s after it could be, want ≤ %v",
				label, q, fault, admitters, f.late, f.joins, livenessBound, f.notAdmitted,
				w.user, rel(w.joinedAt, faultAt), rel(ableAt, faultAt), admittedAt, secs(f.maxGap), livenessBound)
		}
	}
}

// figures are one queue's measurements over the joins a fault could delay.
type figures struct {
	joins       int           // waiting at the fault or made after it
	late        int           // admitted later than livenessBound after they could be, or never
	notAdmitted int           // never admitted before the test gave up
	maxGap      time.Duration // the longest admission gap (until the end for joins never admitted)
	p50         time.Duration // the median admission gap
	silence     time.Duration // the longest time without any admission, from the fault on
	worst       livenessJoin
}

// livenessJoin is one join and its admission (zero when not admitted).
type livenessJoin struct {
	user                 string
	joinedAt, admittedAt time.Time
}

// measure computes a queue's figures. A join's admission gap is the time
// from the later of its join and ableAt to its admission; a join admitted
// before ableAt (by a peer) has a gap of zero.
func measure(joins []livenessJoin, admitted map[string]time.Time, faultAt, ableAt, end time.Time) figures {
	var f figures
	var gaps []time.Duration
	for _, j := range joins {
		at, ok := admitted[j.user]
		if ok && at.Before(faultAt) {
			continue // admitted before the fault: it could not delay this one
		}
		j.admittedAt = at
		could := j.joinedAt
		if ableAt.After(could) {
			could = ableAt
		}
		gap := end.Sub(could)
		if ok {
			gap = max(at.Sub(could), 0)
		} else {
			f.notAdmitted++
		}
		f.joins++
		if !ok || gap > livenessBound {
			f.late++
		}
		if gap > f.maxGap || len(gaps) == 0 {
			f.maxGap, f.worst = gap, j
		}
		gaps = append(gaps, gap)
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		f.p50 = gaps[len(gaps)/2]
	}

	// The longest silence runs from the last admission before the fault (or
	// the fault) through every admission after it, to the last admission —
	// or to the end, when someone was never admitted.
	var times []time.Time
	var lastBefore time.Time
	for _, at := range admitted {
		if !at.Before(faultAt) {
			times = append(times, at)
		} else if at.After(lastBefore) {
			lastBefore = at
		}
	}
	prev := faultAt
	if !lastBefore.IsZero() {
		prev = lastBefore
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	if f.notAdmitted > 0 {
		times = append(times, end)
	}
	for _, at := range times {
		f.silence = max(f.silence, at.Sub(prev))
		prev = at
	}
	return f
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func rel(at, faultAt time.Time) string { return fmt.Sprintf("%+.2fs", at.Sub(faultAt).Seconds()) }

// admissionLog records when USHER_ADMISSIONS stored each shopper's first
// admission, per queue.
type admissionLog struct {
	mu sync.Mutex
	at map[string]map[string]time.Time // queue → user → stored
}

// followAdmissions follows the queues' admission events with an ordered
// consumer until the test ends.
func followAdmissions(t *testing.T, natsURL string, queues []string) *admissionLog {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatalf("connect %s: %v", natsURL, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := &admissionLog{at: map[string]map[string]time.Time{}}
	var subjects []string
	for _, q := range queues {
		subjects = append(subjects, event.AdmittedSubject(q))
		l.at[q] = map[string]time.Time{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, event.StreamAdmissions, jetstream.OrderedConsumerConfig{FilterSubjects: subjects})
	if err != nil {
		t.Fatalf("follow %s: %v", event.StreamAdmissions, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		var a event.Admitted
		if err != nil {
			return
		}
		if _, err := event.Unmarshal(m.Data(), event.TypeAdmitted, &a); err != nil {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if users := l.at[a.Queue]; users != nil {
			if _, seen := users[a.User]; !seen {
				users[a.User] = meta.Timestamp
			}
		}
	})
	if err != nil {
		t.Fatalf("follow %s: %v", event.StreamAdmissions, err)
	}
	t.Cleanup(cc.Stop)
	return l
}

func (l *admissionLog) count(q string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.at[q])
}

// of returns a copy of queue q's admissions.
func (l *admissionLog) of(q string) map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]time.Time, len(l.at[q]))
	for u, at := range l.at[q] {
		out[u] = at
	}
	return out
}

// all reports whether every join the trickle made has been admitted.
func (l *admissionLog) all(tr *trickle) bool {
	for q, joins := range tr.snapshot() {
		admitted := l.of(q)
		for _, j := range joins {
			if _, ok := admitted[j.user]; !ok {
				return false
			}
		}
	}
	return true
}

// trickle joins each queue every joinEvery with a new user, over HTTP,
// until stopped, and records when each join was answered.
type trickle struct {
	mu     sync.Mutex
	made   map[string][]livenessJoin
	errs   []string
	done   chan struct{}
	wg     sync.WaitGroup
	ending sync.Once
}

func startTrickle(t *testing.T, base string, queues []string) *trickle {
	t.Helper()
	tr := &trickle{made: map[string][]livenessJoin{}, done: make(chan struct{})}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, q := range queues {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			tick := time.NewTicker(joinEvery)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-tr.done:
					return
				case <-tick.C:
				}
				user := fmt.Sprintf("u%05d", i)
				req, _ := http.NewRequest("POST", base+"/v1/queues/"+q+"/tickets", nil)
				req.Header.Set("X-User-Id", user)
				res, err := client.Do(req)
				at := time.Now()
				tr.mu.Lock()
				switch {
				case err != nil:
					tr.errs = append(tr.errs, fmt.Sprintf("join %s %s: %v", q, user, err))
				case res.StatusCode != http.StatusAccepted:
					tr.errs = append(tr.errs, fmt.Sprintf("join %s %s = %d, want 202", q, user, res.StatusCode))
				default:
					tr.made[q] = append(tr.made[q], livenessJoin{user: user, joinedAt: at})
				}
				tr.mu.Unlock()
				if res != nil {
					res.Body.Close()
				}
			}
		}()
	}
	t.Cleanup(tr.stop)
	return tr
}

// stop ends the trickle and waits for the joins in flight.
func (tr *trickle) stop() {
	tr.ending.Do(func() { close(tr.done) })
	tr.wg.Wait()
}

func (tr *trickle) joins(q string) []livenessJoin {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.made[q])
}

func (tr *trickle) snapshot() map[string][]livenessJoin {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := map[string][]livenessJoin{}
	for q, js := range tr.made {
		out[q] = slices.Clone(js)
	}
	return out
}

// since counts queue q's joins answered at or after at.
func (tr *trickle) since(q string, at time.Time) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, j := range tr.made[q] {
		if !j.joinedAt.Before(at) {
			n++
		}
	}
	return n
}

// last is when the last join was answered.
func (tr *trickle) last() time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var last time.Time
	for _, js := range tr.made {
		if n := len(js); n > 0 && js[n-1].joinedAt.After(last) {
			last = js[n-1].joinedAt
		}
	}
	return last
}

func (tr *trickle) errors() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.errs)
}
