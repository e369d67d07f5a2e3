package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"usher/internal/event"
)

// A catalog follows the bucket without a consumer — no role but the one
// that declares the streams may create one (see bus.Policy.Permissions):
// the bucket republishes every value it stores on
// event.CatalogLiveSubjects, which each process subscribes to before it
// loads what the bucket holds from the stream's leader (see load). Each
// value comes with its revision (Nats-Sequence) and the revision it replaces
// (Nats-Last-Sequence): a value replacing one this process never had
// shows that the subscription lost something, and so does a bucket whose
// last revision stays ahead of everything received, a reconnection, or a
// subscription that dropped messages; the catalog then loads the bucket
// again. A reload keeps every guarantee a value applied live keeps: no
// copy is ever replaced by an older revision.

// checkEvery is how often a catalog compares what it received with the
// bucket's last revision.
const checkEvery = time.Second

// follower is what keeps a catalog's live copy current.
type follower struct {
	nc     *nats.Conn
	stream jetstream.Stream
	sub    *nats.Subscription
	kick   chan struct{} // a lost value seen: check now

	mu      sync.Mutex
	loading bool   // a load is under way: no gap is judged meanwhile
	gap     bool   // a value arrived that replaces one never received
	seen    uint64 // the last bucket sequence received or loaded
	// What the last check saw: the bucket's last sequence, the
	// connection's reconnections and the messages the subscription
	// dropped.
	last, reconnects, dropped uint64
}

// follow subscribes to the bucket's live subject, loads every queue kv
// holds and returns the catalog, following changes from then on (Run
// checks that nothing was lost). The subscription ends with ctx.
func follow(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) (*Catalog, error) {
	st, err := js.Stream(ctx, event.StreamQueues)
	if err != nil {
		return nil, fmt.Errorf("open catalog: %w", err)
	}
	nc := js.Conn()
	c := &Catalog{kv: kv, queues: map[string]Config{}, revs: map[string]uint64{}, retired: map[string]time.Time{}}
	f := &follower{nc: nc, stream: st, kick: make(chan struct{}, 1), loading: true}
	c.f = f
	// Subscribed first: every value stored after the load's snapshot
	// arrives here.
	if f.sub, err = nc.Subscribe(event.CatalogLiveSubjects, c.receive); err != nil {
		return nil, fmt.Errorf("follow catalog: %w", err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		f.sub.Unsubscribe()
		return nil, fmt.Errorf("follow catalog: %w", err)
	}
	context.AfterFunc(ctx, func() { f.sub.Unsubscribe() })
	f.reconnects = nc.Stats().Reconnects
	if err := c.load(ctx); err != nil {
		f.sub.Unsubscribe()
		return nil, err
	}
	return c, nil
}

// Run checks, until ctx ends, that the live copy missed nothing (see
// follow), and loads the bucket again when it did.
func (c *Catalog) Run(ctx context.Context) error {
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-c.f.kick:
		}
		// A check that fails (the broker away) is tried again at the
		// next tick, and the reconnection it sees then makes it load.
		_ = c.check(ctx)
	}
}

// check loads the bucket again when a value was lost since the last
// check.
func (c *Catalog) check(ctx context.Context) error {
	f := c.f
	info, err := f.stream.Info(ctx)
	if err != nil {
		return err
	}
	reconnects := f.nc.Stats().Reconnects
	dropped, _ := f.sub.Dropped()
	f.mu.Lock()
	// A value stored before the last check that has not arrived by now
	// was lost: its republish takes microseconds.
	lost := f.gap || f.last > f.seen || reconnects != f.reconnects || uint64(dropped) != f.dropped
	f.last, f.reconnects, f.dropped = info.State.LastSeq, reconnects, uint64(dropped)
	if lost {
		f.loading, f.gap = true, false
	}
	f.mu.Unlock()
	if !lost {
		return nil
	}
	return c.load(ctx)
}

// load applies the last value of every key the bucket holds, as of its
// last sequence now, as the stream's leader holds it: the keys from the
// stream's info, then each key's last value, loadReads at a time. The
// stream handle comes from package bus, whose one-message reads go
// through the API only the leader answers. A batched direct get would
// take one round trip, but any replica answers it, and one behind the
// leader (a partitioned one: as of the moment it was cut) answers as of
// its own last sequence while the load counts the leader's as seen — a
// change it missed would then wait for the key's next change.
func (c *Catalog) load(ctx context.Context) error {
	f := c.f
	defer func() {
		f.mu.Lock()
		f.loading = false
		f.mu.Unlock()
	}()
	info, err := f.stream.Info(ctx, jetstream.WithSubjectFilter(event.QueueConfigSubjects))
	if err != nil {
		return fmt.Errorf("load catalog: %w", err)
	}
	upTo := info.State.LastSeq
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(loadReads)
	for subject := range info.State.Subjects {
		g.Go(func() error {
			m, err := f.stream.GetLastMsgForSubject(gctx, subject)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil // purged since the info
			}
			if err != nil {
				return err
			}
			c.apply(entryOf(m.Subject, m.Sequence, m.Header, m.Data))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("load catalog: %w", err)
	}
	f.mu.Lock()
	f.seen = max(f.seen, upTo)
	f.last = max(f.last, upTo)
	f.mu.Unlock()
	return nil
}

// loadReads is how many of a load's reads are in flight at once: a
// bucket of a thousand queues loads in tens of round trips.
const loadReads = 32

// receive applies a value the bucket republished, and tells Run when it
// shows that one was lost.
func (c *Catalog) receive(m *nats.Msg) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return
	}
	e := entryOf(m.Header.Get(jetstream.SubjectHeader), seq, m.Header, m.Data)
	if e.key == "" {
		return
	}
	prev, _ := strconv.ParseUint(m.Header.Get(jetstream.LastSequenceHeader), 10, 64)
	f := c.f
	c.mu.RLock()
	known := c.revs[e.key]
	c.mu.RUnlock()
	f.mu.Lock()
	f.seen = max(f.seen, seq)
	// The value this one replaces is newer than the one held: it never
	// arrived. (While a load runs, it may still be on its way there.)
	lost := !f.loading && prev > known
	f.gap = f.gap || lost
	f.mu.Unlock()
	c.apply(e)
	if lost {
		select {
		case f.kick <- struct{}{}:
		default:
		}
	}
}

// entry is one value of the bucket: a queue's key, the value (none for a
// deletion), and the revision that stored it.
type entry struct {
	key     string
	value   []byte
	rev     uint64
	deleted bool
}

// entryOf reads a message of the bucket, as a direct get or a republish
// delivers it: its subject names the key, a KV-Operation header a
// deletion or purge.
func entryOf(subject string, seq uint64, h nats.Header, data []byte) entry {
	key, ok := strings.CutPrefix(subject, keyPrefix)
	if !ok {
		return entry{}
	}
	op := h.Get("KV-Operation")
	return entry{key: key, value: data, rev: seq, deleted: op == "DEL" || op == "PURGE"}
}

func (c *Catalog) apply(e entry) {
	if e.key == "" {
		return
	}
	if e.deleted {
		c.mu.Lock()
		if e.rev > c.revs[e.key] {
			delete(c.queues, e.key)
			c.revs[e.key] = e.rev
		}
		c.mu.Unlock()
		return
	}
	if at, ok := RetiredAt(e.value); ok {
		c.retire(e.key, at, e.rev)
		return
	}
	// Fields a stored configuration lacks (it was written before they
	// existed) take their defaults, as they do in an admin PUT.
	cfg := Defaults(e.key)
	if err := json.Unmarshal(e.value, &cfg); err != nil {
		return
	}
	c.store(e.key, cfg, e.rev)
}
