package catalog_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/testenv"
)

// broker is a JetStream connection to the NATS server at url (a test's
// own: testenv.NATS), closed when the test ends.
func broker(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, js, err := bus.Open(t.Context(), bus.Settings{URLs: []string{url}, Replicas: 1}, "catalog-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return js
}

// open is catalog.Open for a test.
func open(t *testing.T, js jetstream.JetStream) *catalog.Catalog {
	t.Helper()
	c, err := catalog.Open(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  catalog.Config
		want []string
	}{
		{"defaults are valid", catalog.Defaults("demo"), nil},
		{"everything wrong", catalog.Config{Name: "a.b", TargetActive: 0, MaxAdmitPerTick: -1, TickMs: 9, TokenTTLSeconds: 0, State: "?"},
			[]string{"name", "targetActive", "maxAdmitPerTick", "tickMs", "tokenTtlSeconds", "state"}},
		{"figures that would wrap around as durations", catalog.Config{Name: "q", TargetActive: 1_000_001, MaxAdmitPerTick: 1_000_001,
			TickMs: 10_000_000_000_000, TokenTTLSeconds: 99_999_999_999, State: "open"},
			[]string{"targetActive", "maxAdmitPerTick", "tickMs", "tokenTtlSeconds"}},
		{"the largest figures", catalog.Config{Name: "q", TargetActive: 1_000_000, MaxAdmitPerTick: 1_000_000,
			TickMs: 60_000, TokenTTLSeconds: 86_400, State: "open"}, nil},
		{"an order limit and a SKU", catalog.Config{Name: "q", TargetActive: 1, TickMs: 10, TokenTTLSeconds: 1, State: "open",
			SKU: "no spaces", MaxQuantity: 1001}, []string{"sku", "maxQuantity"}},
		{"sku and skus both: which one sells?", catalog.Config{Name: "q", TargetActive: 1, TickMs: 10, TokenTTLSeconds: 1, State: "open",
			SKU: "shoe", SKUs: []string{"shoe-41", "shoe-42"}}, []string{"sku"}},
		{"an allow list of user ids", catalog.Config{Name: "q", TargetActive: 1, TickMs: 10, TokenTTLSeconds: 1, State: "open",
			Allow: []string{"vip", "a.b_c:d@e-f"}}, nil},
		{"an allow list with what no join can be", catalog.Config{Name: "q", TargetActive: 1, TickMs: 10, TokenTTLSeconds: 1, State: "open",
			Allow: []string{"vip", "bad user", ""}}, []string{"allow"}},
		{"every rate limit off", withLimits(catalog.RateLimit{}), nil},
		{"a rate without a burst", withLimits(catalog.RateLimit{PerIPPerSecond: 1, PerUserPerSecond: 1, PerUserBurst: 0}),
			[]string{"rateLimit.perIpBurst", "rateLimit.perUserBurst"}},
		{"negative and huge limits", withLimits(catalog.RateLimit{PerIPPerSecond: -1, PerUserPerSecond: 2_000_000, PerUserBurst: 1, OrdersPerSecond: -5}),
			[]string{"rateLimit.perIpPerSecond", "rateLimit.perUserPerSecond", "rateLimit.ordersPerSecond"}},
		{"adaptive within its bounds", withAdaptive(catalog.Adaptive{Enabled: true, Min: 5, Max: 160}), nil},
		{"adaptive off ignores its bounds", withAdaptive(catalog.Adaptive{Min: 50, Max: 10}), nil},
		{"adaptive with no floor", withAdaptive(catalog.Adaptive{Enabled: true, Min: 0, Max: 40}), []string{"adaptive"}},
		{"adaptive must start within its bounds", withAdaptive(catalog.Adaptive{Enabled: true, Min: 30, Max: 40}), []string{"adaptive"}},
		{"adaptive beyond its ceiling and a tiny window", withAdaptive(catalog.Adaptive{Enabled: true, Min: 1, Max: 200_000, WindowMs: 50}),
			[]string{"adaptive", "adaptive.windowMs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cfg.Validate()
			if len(got) != len(tt.want) {
				t.Fatalf("Validate() = %v, want fields %v", got, tt.want)
			}
			for i, fe := range got {
				if fe.Name != tt.want[i] {
					t.Errorf("field %d = %s, want %s", i, fe.Name, tt.want[i])
				}
			}
		})
	}
}

func withAdaptive(a catalog.Adaptive) catalog.Config {
	c := catalog.Defaults("q") // targetActive 20
	c.Adaptive = &a
	return c
}

func withLimits(rl catalog.RateLimit) catalog.Config {
	c := catalog.Defaults("q")
	c.RateLimit = rl
	return c
}

// A configuration stored before a field existed reads back with the
// field's default, as an admin PUT that omits it does.
func TestOldConfigurationsTakeNewDefaults(t *testing.T) {
	ctx := t.Context()
	js := broker(t, testenv.NATS(t))
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: catalog.Bucket, History: 16})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "old", []byte(`{"name":"old","targetActive":3,"tickMs":100,"tokenTtlSeconds":60,"state":"open"}`)); err != nil {
		t.Fatal(err)
	}
	got, ok := open(t, js).Get("old")
	if want := catalog.DefaultRateLimit(); !ok || got.RateLimit != want || got.TargetActive != 3 {
		t.Fatalf("Get(old) = %+v, want targetActive 3 and rateLimit %+v", got, want)
	}
}

// A change written through one catalog reaches another process's catalog
// within a second, without restarts.
func TestChangesReachEveryCatalog(t *testing.T) {
	ctx, url := t.Context(), testenv.NATS(t)
	follower := func() *catalog.Catalog { // each a process of its own
		c := open(t, broker(t, url))
		go c.Run(ctx)
		return c
	}
	writer, reader := follower(), follower()
	cfg := catalog.Defaults("drop")
	created, err := writer.Put(ctx, cfg)
	if err != nil || !created {
		t.Fatalf("Put = %v, %v; want created", created, err)
	}
	cfg.TargetActive = 99
	if created, _ := writer.Put(ctx, cfg); created {
		t.Fatal("second Put reported created")
	}
	testenv.Eventually(t, time.Second, func() bool {
		got, ok := reader.Get("drop")
		return ok && got.TargetActive == 99
	}, "the other catalog did not see targetActive 99")
	// A catalog opened later loads the current state.
	if got, ok := follower().Get("drop"); !ok || got.TargetActive != 99 {
		t.Fatalf("late catalog Get = %+v, %v", got, ok)
	}
}

// Update is a compare-and-set: a writer that changed the queue in between
// is never overwritten; the change runs again on what they wrote.
func TestUpdateNeverOverwritesAConcurrentChange(t *testing.T) {
	ctx := t.Context()
	js := broker(t, testenv.NATS(t))
	a, b := open(t, js), open(t, js)
	if _, err := a.Put(ctx, catalog.Defaults("q")); err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, after, err := a.Update(ctx, "q", func(c *catalog.Config) bool {
		calls++
		if calls == 1 { // an operator's change lands between the read and the write
			op := catalog.Defaults("q")
			op.TargetActive = 77
			if _, err := b.Put(ctx, op); err != nil {
				t.Fatal(err)
			}
		}
		c.State, c.ClosedReason = catalog.StateClosed, catalog.ReasonSoldOut
		return true
	})
	if err != nil || calls != 2 || after.TargetActive != 77 || after.State != catalog.StateClosed {
		t.Fatalf("Update = %+v, %v after %d calls; want the operator's targetActive 77 kept and the queue closed", after, err, calls)
	}
	if _, _, err := a.Update(ctx, "q", func(c *catalog.Config) bool { return false }); !errors.Is(err, catalog.ErrUnchanged) {
		t.Fatalf("Update without a change = %v, want ErrUnchanged", err)
	}
}

// Operators and admitters changing one queue at once all land: none is
// refused for their number (20 concurrent admin PUTs answered 1 to 4 of
// them 503 "too many concurrent writers"), none is lost.
func TestConcurrentChangesAllLand(t *testing.T) {
	ctx := t.Context()
	js := broker(t, testenv.NATS(t))
	cats := []*catalog.Catalog{open(t, js), open(t, js), open(t, js), open(t, js)}
	start := catalog.Defaults("q")
	start.TargetActive = 1
	if _, err := cats[0].Put(ctx, start); err != nil {
		t.Fatal(err)
	}
	const writers = 32
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			_, _, err := cats[i%len(cats)].Update(ctx, "q", func(c *catalog.Config) bool {
				c.TargetActive++
				return true
			})
			errs <- err
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if c, _, _ := cats[0].Update(ctx, "q", func(*catalog.Config) bool { return false }); c.TargetActive != 1+writers {
		t.Fatalf("targetActive = %d after %d increments, want %d", c.TargetActive, writers, 1+writers)
	}
}

// The bucket republishes a catalog's own writes too, after Put has stored
// them: what arrives late must never put an older configuration back, not
// even for a moment (a PUT's new rate limits missed by the next join).
func TestOwnWritesAreNeverUndoneByTheWatch(t *testing.T) {
	ctx := t.Context()
	js := broker(t, testenv.NATS(t))
	c := open(t, js)
	var (
		mu   sync.Mutex
		seen []int
	)
	c.OnChange(func(cfg catalog.Config) {
		mu.Lock()
		seen = append(seen, cfg.TargetActive)
		mu.Unlock()
	})
	// Both writes land before the watch has delivered either.
	cfg := catalog.Defaults("own")
	for _, n := range []int{1, 2} {
		cfg.TargetActive = n
		if _, err := c.Put(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	go c.Run(ctx)
	// A third write from another process marks how far the watch has come.
	cfg.TargetActive = 3
	if _, err := open(t, js).Put(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		got, _ := c.Get("own")
		return got.TargetActive == 3
	}, "the watch did not deliver the other process's write")
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, []int{1, 2, 3}) {
		t.Fatalf("the live copy went through targetActive %v, want [1 2 3]: the watch put an older write back", seen)
	}
}

// A deleted queue leaves every catalog and its name is retired: no Put or
// Update makes it a queue again, in the process that deleted it or any
// other, and a catalog opened later knows it too.
func TestADeletedQueuesNameIsRetired(t *testing.T) {
	ctx, url := t.Context(), testenv.NATS(t)
	follower := func() *catalog.Catalog {
		c := open(t, broker(t, url))
		go c.Run(ctx)
		return c
	}
	writer, reader := follower(), follower()
	cfg := catalog.Defaults("gone")
	if _, err := writer.Put(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("still open")
	if _, err := writer.Delete(ctx, "gone", time.Now(), func(c catalog.Config) error {
		if c.State != catalog.StateClosed {
			return refused
		}
		return nil
	}); !errors.Is(err, refused) {
		t.Fatalf("Delete of an open queue = %v, want its check's error", err)
	}
	if _, ok := writer.Get("gone"); !ok {
		t.Fatal("a refused Delete took the queue out")
	}
	if _, _, err := writer.Update(ctx, "gone", func(c *catalog.Config) bool { c.State = catalog.StateClosed; return true }); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	deleted, err := writer.Delete(ctx, "gone", at, func(catalog.Config) error { return nil })
	if err != nil || deleted.State != catalog.StateClosed {
		t.Fatalf("Delete = %+v, %v; want the closed configuration", deleted, err)
	}
	if _, ok := writer.Get("gone"); ok {
		t.Fatal("the deleting catalog still holds the queue")
	}
	// Not just "no queue gone": the reader may not have had the queue yet.
	testenv.Eventually(t, time.Second, func() bool {
		_, held := reader.Get("gone")
		_, retired := reader.Retired("gone")
		return !held && retired
	}, "the other catalog still holds the queue")
	for name, c := range map[string]*catalog.Catalog{"writer": writer, "reader": reader, "opened later": follower()} {
		if got, ok := c.Retired("gone"); !ok || !got.Equal(at) {
			t.Errorf("%s: Retired = %v, %v; want %v", name, got, ok, at)
		}
		if names := c.RetiredNames(); !slices.Equal(names, []string{"gone"}) {
			t.Errorf("%s: RetiredNames = %v", name, names)
		}
		if _, ok := c.Get("gone"); ok {
			t.Errorf("%s: Get finds the deleted queue", name)
		}
	}
	if _, err := reader.Put(ctx, catalog.Defaults("gone")); !errors.Is(err, catalog.ErrRetired) {
		t.Errorf("Put of a retired name = %v, want ErrRetired", err)
	}
	if _, _, err := reader.Update(ctx, "gone", func(*catalog.Config) bool { return true }); !errors.Is(err, catalog.ErrRetired) {
		t.Errorf("Update of a retired name = %v, want ErrRetired", err)
	}
	if _, err := reader.Delete(ctx, "gone", at, func(catalog.Config) error { return nil }); !errors.Is(err, catalog.ErrNoQueue) {
		t.Errorf("Delete again = %v, want ErrNoQueue", err)
	}
	if _, err := reader.Delete(ctx, "never", at, func(catalog.Config) error { return nil }); !errors.Is(err, catalog.ErrNoQueue) {
		t.Errorf("Delete of an unknown queue = %v, want ErrNoQueue", err)
	}
}

// A process is told of every queue deleted, by itself or by another, once
// its live copy has dropped it: a queue deleted stays deleted, so once.
func TestADeletedQueueIsToldToOnRetire(t *testing.T) {
	ctx, url := t.Context(), testenv.NATS(t)
	type told struct {
		name string
		live bool // the live copy still held the queue when told
	}
	follower := func() (*catalog.Catalog, chan told) {
		c := open(t, broker(t, url))
		ch := make(chan told, 4)
		c.OnRetire(func(name string) { _, live := c.Get(name); ch <- told{name, live} })
		go c.Run(ctx)
		return c, ch
	}
	writer, wrote := follower()
	_, read := follower()
	cfg := catalog.Defaults("gone")
	cfg.State = catalog.StateClosed
	if _, err := writer.Put(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Delete(ctx, "gone", time.Now(), func(catalog.Config) error { return nil }); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan told{"the deleting catalog": wrote, "the other": read} {
		select {
		case got := <-ch:
			if got != (told{"gone", false}) {
				t.Errorf("%s told %+v, want gone, no longer live", name, got)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s was not told of the deletion", name)
		}
		select {
		case again := <-ch:
			t.Errorf("%s told twice: %+v", name, again)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Following the catalog creates no consumer on the bucket: under broker
// auth no role but the one that declares the streams may create one (a
// push consumer may deliver anywhere). Every process receives what the
// bucket republishes and loads it with direct gets.
func TestTheCatalogIsFollowedWithoutAConsumer(t *testing.T) {
	ctx, url := t.Context(), testenv.NATS(t)
	js := broker(t, url)
	writer := open(t, js)
	reader := open(t, broker(t, url))
	go reader.Run(ctx)
	cfg := catalog.Defaults("followed")
	if _, err := writer.Put(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Second, func() bool { _, ok := reader.Get("followed"); return ok }, "the other catalog did not see the queue")
	st, err := js.Stream(ctx, event.StreamQueues)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Consumers; n != 0 {
		t.Errorf("the bucket has %d consumers, want none", n)
	}
}

// A value the subscription never received reaches the catalog anyway:
// here the bucket republished nothing while it was stored, and within a
// couple of checks the catalog sees the bucket's last revision ahead of
// what arrived and loads it again.
func TestAValueLostOnTheWayIsLoadedAnyway(t *testing.T) {
	ctx, url := t.Context(), testenv.NATS(t)
	js := broker(t, url)
	writer := open(t, js)
	reader := open(t, broker(t, url))
	go reader.Run(ctx)
	kv, err := js.KeyValue(ctx, catalog.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := kv.Status(ctx)
	quiet := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config
	quiet.RePublish = nil
	if _, err := js.UpdateStream(ctx, quiet); err != nil {
		t.Fatal(err)
	}
	lost := catalog.Defaults("lost")
	lost.TargetActive = 7
	if _, err := writer.Put(ctx, lost); err != nil {
		t.Fatal(err)
	}
	open(t, js) // the admitter starts again: the bucket republishes again
	testenv.Eventually(t, 5*time.Second, func() bool {
		got, ok := reader.Get("lost")
		return ok && got.TargetActive == 7
	}, "the catalog never loaded the value it did not receive")
}

// A catalog loads what the bucket holds from the stream's leader, never
// by a direct get, which any replica answers — one behind the leader (a
// partitioned one) as of its own last sequence, so the load would count
// as seen a change it never got.
func TestTheCatalogLoadsFromTheStreamsLeader(t *testing.T) {
	ctx, url := t.Context(), testenv.NATS(t)
	writer := open(t, broker(t, url))
	name := testenv.Name(t)
	for _, q := range []string{"a", "b", "c"} {
		if _, err := writer.Put(ctx, catalog.Defaults(name+q)); err != nil {
			t.Fatal(err)
		}
	}
	direct, leader := spyOnReads(t, url)
	c := open(t, broker(t, url))
	for _, q := range []string{"a", "b", "c"} {
		if _, ok := c.Get(name + q); !ok {
			t.Errorf("queue %s not loaded", q)
		}
	}
	time.Sleep(100 * time.Millisecond) // the spy's copies on their way
	if direct.Load() != 0 || leader.Load() < 3 {
		t.Errorf("the load asked %d direct gets and %d of the leader; want none and one a queue", direct.Load(), leader.Load())
	}
}

// A change — an update, a deletion — reads what it compares and sets from
// the stream's leader: a replica behind it would hand the change an older
// configuration.
func TestAChangeReadsTheQueueFromTheStreamsLeader(t *testing.T) {
	ctx, url := t.Context(), testenv.NATS(t)
	c := open(t, broker(t, url))
	name := testenv.Name(t)
	if _, err := c.Put(ctx, catalog.Defaults(name)); err != nil {
		t.Fatal(err)
	}
	direct, leader := spyOnReads(t, url)
	if _, _, err := c.Update(ctx, name, func(cfg *catalog.Config) bool { cfg.State = catalog.StatePaused; return true }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Delete(ctx, name, time.Now(), func(catalog.Config) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Update(ctx, name, func(*catalog.Config) bool { return true }); !errors.Is(err, catalog.ErrRetired) {
		t.Errorf("an update of a deleted queue: %v, want ErrRetired", err)
	}
	if _, _, err := c.Update(ctx, name+"-never", func(*catalog.Config) bool { return true }); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("an update of a queue never put: %v, want ErrKeyNotFound", err)
	}
	time.Sleep(100 * time.Millisecond) // the spy's copies on their way
	if direct.Load() != 0 || leader.Load() < 4 {
		t.Errorf("the changes asked %d direct gets and %d of the leader; want none and one each", direct.Load(), leader.Load())
	}
}

// spyOnReads counts the reads of the catalog's stream from now on: direct
// gets (any replica answers) and the API's message gets (the leader does).
func spyOnReads(t *testing.T, url string) (direct, leader *atomic.Int64) {
	t.Helper()
	spy, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spy.Close)
	direct, leader = new(atomic.Int64), new(atomic.Int64)
	for subject, n := range map[string]*atomic.Int64{
		"$JS.API.DIRECT.GET." + event.StreamQueues:        direct,
		"$JS.API.DIRECT.GET." + event.StreamQueues + ".>": direct,
		"$JS.API.STREAM.MSG.GET." + event.StreamQueues:    leader,
	} {
		if _, err := spy.Subscribe(subject, func(*nats.Msg) { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	return direct, leader
}

// A bucket of more queues than one batched read could answer for (1024
// keys) loads whole, each queue at its last value.
func TestABucketOfManyQueuesLoadsWhole(t *testing.T) {
	ctx := t.Context()
	js := broker(t, testenv.NATS(t))
	writer := open(t, js)
	const n = 1100
	for i := range n {
		cfg := catalog.Defaults(fmt.Sprintf("q%04d", i))
		if _, err := writer.Put(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	cfg := catalog.Defaults("q0000")
	cfg.TargetActive = 5
	if _, err := writer.Put(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	c := open(t, js)
	if got := len(c.List()); got != n {
		t.Fatalf("a catalog opened on %d queues holds %d", n, got)
	}
	if got, _ := c.Get("q0000"); got.TargetActive != 5 {
		t.Errorf("q0000 loaded with targetActive %d, want its last value's 5", got.TargetActive)
	}
}
