package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/testenv"
)

// nats-server lets whoever creates a push consumer name any deliver
// subject and delivers there through an internal client, without checking
// the creator's publish permissions. It delivers once something
// subscribes to that very subject — then every subscription that matches
// it receives the message, a stream's own included, and the stream
// stores it. So no role may subscribe to a subject a stream stores: each
// role's subscriptions are its inbox and subjects no stream captures.
func TestNoRoleMaySubscribeToAStoredSubject(t *testing.T) {
	var stored []string
	for _, cfg := range bus.Streams() {
		stored = append(stored, cfg.Subjects...)
	}
	stored = append(stored, event.QueueConfigSubjects, event.SeedSubjects)
	for _, r := range policy.Roles() {
		perms, _ := policy.Permissions(r)
		for _, sub := range perms.Subscribe.Allow {
			for _, s := range stored {
				if server.SubjectsCollide(sub, s) {
					t.Errorf("%s may subscribe to %s, which a stream stores (%s)", r, sub, s)
				}
			}
		}
	}
}

// The relay, on a broker configured as make run configures it: wherever
// a role may create consumers — only the admitter may — it creates a push
// consumer delivering into every other stream's subjects (the JSON the
// nats CLI sends for `nats consumer add --deliver <subject>`); then every
// role tries to subscribe to each of those subjects, to give the
// consumers the interest they wait for. The broker refuses every such
// subscription, no push consumer is bound, and every stream still holds
// exactly its own records.
func TestNoRoleCanRelayIntoAStreamWhileTheBrokerRuns(t *testing.T) {
	b := newBroker(t)
	adm := b.declare(t)
	q := testenv.Name(t)
	clients := map[bus.Role]*client{bus.Admitter: adm}
	for _, r := range policy.Roles() {
		if clients[r] == nil {
			clients[r] = b.as(t, r)
		}
	}
	records(t, clients, q)
	before := streamCounts(t, adm)
	targets := relayTargets(q)

	var relays []relay
	for _, r := range policy.Roles() {
		relays = append(relays, plantRelays(t, clients[r], targets, time.Hour)...)
	}
	if len(relays) == 0 {
		t.Fatal("no role could create a push consumer: the test tries nothing")
	}
	t.Logf("%d push consumers into other streams", len(relays))
	for _, r := range policy.Roles() {
		c := clients[r]
		for _, target := range targets {
			if _, err := c.nc.SubscribeSync(target.subject); err != nil {
				t.Fatal(err)
			}
			if !c.refusedWithin(target.subject, 5*time.Second) {
				t.Errorf("%s subscribed to %s, which %s stores", r, target.subject, target.stream)
			}
		}
	}
	if t.Failed() {
		// Show what the subscriptions let through.
		testenv.Eventually(t, 5*time.Second, func() bool {
			return !equalCounts(streamCounts(t, adm), before)
		}, "relayed records stored")
		t.Fatalf("stored by the relays: before %v, after %v", before, streamCounts(t, adm))
	}
	for _, rl := range relays {
		info := rl.info(t)
		if info.PushBound || info.Delivered.Stream != 0 {
			t.Errorf("%s's push consumer %s on %s to %s: bound %v, delivered up to %d; want unbound, nothing delivered",
				rl.by.role, rl.name, rl.stream, rl.target, info.PushBound, info.Delivered.Stream)
		}
	}
	if after := streamCounts(t, adm); !equalCounts(after, before) {
		t.Errorf("stream counts after the relays %v, before %v", after, before)
	}
}

// A broker that restarts recovers an ephemeral push consumer bound if any
// subscription matches its deliver subject — the stream that stores that
// subject is one — and delivers at once, without anybody subscribing. So
// every record usher writes names its stream (Nats-Expected-Stream, added
// by the JetStream context bus.Open returns): relayed into another stream
// after a restart, it is refused there.
func TestAfterARestartEveryStreamRefusesAnothersRecords(t *testing.T) {
	b := newRestartableBroker(t)
	adm := b.declare(t)
	q := testenv.Name(t)
	// The services' records, through the JetStream context they run on:
	// events, a queue's configuration (created and changed) and a seed.
	ctx := t.Context()
	open := func(r bus.Role) jetstream.JetStream {
		t.Helper()
		nc, js, err := bus.Open(ctx, b.settings(r), "records-"+string(r))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return js
	}
	publish := func(r bus.Role, subjects ...string) {
		t.Helper()
		js := open(r)
		for _, s := range subjects {
			body, _ := event.Marshal(s, "test", "u", time.Now(), struct{}{})
			if _, err := js.Publish(ctx, s, body); err != nil {
				t.Fatalf("%s publishes %s: %v", r, s, err)
			}
		}
	}
	publish(bus.Gateway, event.EnterSubject(q), event.LeaveSubject(q), event.OrderRequestedSubject(q),
		event.ConfigChangedSubject, event.SeedSubject(q, "c0ffee"))
	publish(bus.Admitter, event.AdmittedSubject(q), event.LimitChangedSubject)
	publish(bus.OrderWorker, event.OrderCompletedSubject(q))
	cat, err := catalog.Attach(ctx, open(bus.Gateway))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := cat.Put(ctx, catalog.Defaults(q)); err != nil {
			t.Fatal(err)
		}
	}
	before := streamCounts(t, adm)

	// The admitter, the one role that may create consumers, plants push
	// consumers into every other stream, and the broker restarts.
	relays := plantRelays(t, b.as(t, bus.Admitter), relayTargets(q), time.Hour)
	b.restart(t)
	testenv.Eventually(t, 10*time.Second, adm.nc.IsConnected, "the admitter reconnects")

	delivered := 0
	for _, rl := range relays {
		info := rl.info(t)
		if !info.PushBound {
			continue
		}
		last := streamLast(t, adm, rl.stream)
		testenv.Eventually(t, 10*time.Second, func() bool {
			return rl.info(t).Delivered.Stream >= last
		}, "%s to %s delivers all of %s", rl.name, rl.target, rl.stream)
		delivered++
	}
	if delivered == 0 {
		t.Fatal("no push consumer delivered after the restart: the test relays nothing")
	}
	t.Logf("%d of %d push consumers delivered after the restart", delivered, len(relays))
	if after := streamCounts(t, adm); !equalCounts(after, before) {
		t.Errorf("after %d push consumers relayed every record they had: stream counts %v, before %v", delivered, after, before)
	}
}

// No role but the admitter may create a consumer — push or pull, on any
// stream or bucket, under any name, its own durable's included — so none
// can have the broker deliver anywhere: each role's try, as the nats CLI
// sends it for `nats consumer add --deliver`, to deliver on the order
// worker's consumer's reset subject (the one subject a relay was measured
// to reach: TestHowFarARelayReaches) is refused, no stream gains a
// consumer, and the order worker's consumer stays where it was.
func TestNoRoleButTheAdmitterMayCreateAConsumer(t *testing.T) {
	b := newBroker(t)
	adm := b.declare(t)
	ctx := t.Context()
	q := testenv.Name(t)
	if _, err := b.as(t, bus.Gateway).js.Publish(ctx, event.OrderRequestedSubject(q), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	work, err := adm.js.Consumer(ctx, event.StreamOrders, event.ConsumerOrderWorker)
	if err != nil {
		t.Fatalf("the admitter declared the order worker's consumer: %v", err)
	}
	streams := []string{event.StreamEntries, event.StreamAdmissions, event.StreamOrders, event.StreamOps,
		event.StreamQueues, event.StreamSeeds}
	consumers := func() map[string]int {
		n := map[string]int{}
		for _, s := range streams {
			st, err := adm.js.Stream(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			n[s] = st.CachedInfo().State.Consumers
		}
		return n
	}
	before := consumers()
	reset := "$JS.API.CONSUMER.RESET." + event.StreamOrders + "." + event.ConsumerOrderWorker
	for _, r := range policy.Roles() {
		if r == bus.Admitter {
			continue
		}
		c := b.as(t, r)
		names := []string{"relay", event.ConsumerOrderWorker, reader}
		for _, s := range streams {
			for _, name := range names {
				req, _ := json.Marshal(map[string]any{"stream_name": s, "config": map[string]any{
					"name": name, "durable_name": name, "deliver_subject": reset, "deliver_policy": "all", "ack_policy": "none"}})
				subject := "$JS.API.CONSUMER.CREATE." + s + "." + name
				if err := c.nc.PublishRequest(subject, c.nc.NewRespInbox(), req); err != nil {
					t.Fatal(err)
				}
				if !c.refusedWithin(subject, 5*time.Second) {
					t.Errorf("%s created a consumer %s on %s", r, name, s)
				}
			}
		}
	}
	if after := consumers(); !maps.Equal(after, before) {
		t.Errorf("consumers per stream %v, before the tries %v", after, before)
	}
	if info, err := work.Info(ctx); err != nil || info.Delivered.Stream != 0 || info.NumPending != 1 {
		t.Errorf("the order worker's consumer: %+v, %v; want the one request pending, nothing delivered", info, err)
	}
}

// What stays open (docs/security.md, known gaps): the admitter's key,
// root-equivalent for JetStream (it may create and update the streams),
// may still create a push consumer delivering where it may not publish —
// here on the subject nats-server listens on for the order worker's
// consumer's reset: an admission it publishes shaped as a reset request
// moves that consumer past order requests nobody has processed. This test pins the
// server's behaviour the known gap describes; it fails once nats-server
// checks a deliver subject against its creator's publish permissions.
func TestTheAdmittersPushConsumerStillReachesAnotherConsumersControlSubjects(t *testing.T) {
	b := newBroker(t)
	adm := b.declare(t)
	q := testenv.Name(t)
	gw := b.as(t, bus.Gateway)
	ctx := t.Context()
	for range 3 {
		if _, err := gw.js.Publish(ctx, event.OrderRequestedSubject(q), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := adm.js.Consumer(ctx, event.StreamOrders, event.ConsumerOrderWorker)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.js.Publish(ctx, event.AdmittedSubject(q), []byte(`{"seq":1000}`)); err != nil {
		t.Fatal(err)
	}
	reset := "$JS.API.CONSUMER.RESET." + event.StreamOrders + "." + event.ConsumerOrderWorker
	if _, err := createPush(adm, event.StreamAdmissions, "reset", reset, event.AdmittedSubject(q), time.Minute); err != nil {
		t.Fatalf("the admitter's push consumer: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Stream == 999
	}, "the order worker's consumer moved past the requests it never delivered")
}

// records has each writer store one record in each stream it writes.
func records(t *testing.T, clients map[bus.Role]*client, q string) {
	t.Helper()
	ctx := t.Context()
	for r, subjects := range map[bus.Role][]string{
		bus.Gateway:     {event.EnterSubject(q), event.OrderRequestedSubject(q), event.ConfigChangedSubject, "$KV." + event.BucketQueues + "." + q},
		bus.Admitter:    {event.AdmittedSubject(q), event.LimitChangedSubject},
		bus.OrderWorker: {event.OrderCompletedSubject(q)},
	} {
		for _, s := range subjects {
			if _, err := clients[r].js.Publish(ctx, s, []byte(`{}`)); err != nil {
				t.Fatalf("%s publishes %s: %v", r, s, err)
			}
		}
	}
}

// target is a subject a stream stores, for a push consumer to deliver on.
type target struct{ subject, stream string }

// relayTargets are one subject of each of usher's streams and buckets.
func relayTargets(q string) []target {
	return []target{
		{event.EnterSubject(q), event.StreamEntries},
		{event.AdmittedSubject(q), event.StreamAdmissions},
		{event.OrderCompletedSubject(q), event.StreamOrders},
		{"usher.ops.relayed", event.StreamOps},
		{"$KV." + event.BucketQueues + "." + q, event.StreamQueues},
		{event.SeedSubject(q, "c0ffee"), event.StreamSeeds},
	}
}

// relay is a push consumer a role created to deliver into another stream.
type relay struct {
	by                   *client
	stream, name, target string
}

type consumerInfo struct {
	PushBound bool `json:"push_bound"`
	Delivered struct {
		Stream uint64 `json:"stream_seq"`
	} `json:"delivered"`
}

// info is the consumer's state, as its creator reads it.
func (rl relay) info(t *testing.T) consumerInfo {
	t.Helper()
	m, err := rl.by.nc.Request("$JS.API.CONSUMER.INFO."+rl.stream+"."+rl.name, nil, 2*time.Second)
	if err != nil {
		t.Fatalf("info of %s on %s: %v", rl.name, rl.stream, err)
	}
	var info consumerInfo
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// plantRelays has c create, on every stream it may create consumers on, a
// push consumer into each target another stream stores, and returns those
// the broker created.
func plantRelays(t *testing.T, c *client, targets []target, inactive time.Duration) []relay {
	t.Helper()
	perms, _ := policy.Permissions(c.role)
	var out []relay
	for _, source := range targets {
		for _, tg := range targets {
			if tg.stream == source.stream {
				continue // nats-server refuses a delivery into the consumer's own stream
			}
			name := "relay-" + strings.ToLower(strings.TrimPrefix(tg.stream, "KV_"))
			if !allowed(perms.Publish, "$JS.API.CONSUMER.CREATE."+source.stream+"."+name) {
				continue
			}
			if _, err := createPush(c, source.stream, name, tg.subject, "", inactive); err != nil {
				t.Fatalf("%s: push consumer on %s to %s: %v", c.role, source.stream, tg.subject, err)
			}
			out = append(out, relay{c, source.stream, name, tg.subject})
		}
	}
	return out
}

// createPush creates a push consumer as `nats consumer add` does: a
// request on $JS.API.CONSUMER.CREATE.<stream>.<name> naming its deliver
// subject.
func createPush(c *client, stream, name, deliver, filter string, inactive time.Duration) (json.RawMessage, error) {
	cfg := map[string]any{
		"name": name, "deliver_subject": deliver, "deliver_policy": "all", "ack_policy": "none",
		"inactive_threshold": inactive.Nanoseconds(),
	}
	if filter != "" {
		cfg["filter_subject"] = filter
	}
	req, _ := json.Marshal(map[string]any{"stream_name": stream, "config": cfg})
	m, err := c.nc.Request("$JS.API.CONSUMER.CREATE."+stream+"."+name, req, 2*time.Second)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, errors.New(resp.Error.Description)
	}
	return m.Data, nil
}

// allowed reports whether rules allow publishing on the literal subject.
func allowed(rules bus.Rules, subject string) bool {
	match := func(patterns []string) bool {
		for _, p := range patterns {
			if server.SubjectsCollide(p, subject) {
				return true
			}
		}
		return false
	}
	return match(rules.Allow) && !match(rules.Deny)
}

// refusedWithin reports whether the server refused c the subject within d.
func (c *client) refusedWithin(subject string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// streamCounts are the last sequences of usher's streams and buckets:
// every record each ever stored.
func streamCounts(t *testing.T, adm *client) map[string]uint64 {
	t.Helper()
	counts := map[string]uint64{}
	for _, tg := range relayTargets("x") {
		counts[tg.stream] = streamLast(t, adm, tg.stream)
	}
	return counts
}

func equalCounts(a, b map[string]uint64) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}

// streamLast is the last sequence of stream: every record it ever stored.
func streamLast(t *testing.T, adm *client, stream string) uint64 {
	t.Helper()
	st, err := adm.js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	return st.CachedInfo().State.LastSeq
}

// restartableBroker is a broker (see newBroker) that can be stopped and
// started again on the same port and store, as a deployment's broker
// restarts.
type restartableBroker struct {
	*broker
	conf, store string
	port        int
	srv         *server.Server
}

func newRestartableBroker(t *testing.T) *restartableBroker {
	t.Helper()
	dir := t.TempDir()
	if _, err := bus.WriteAuth(policy, dir, func(r bus.Role) string { return keyFile(dir, r) }); err != nil {
		t.Fatal(err)
	}
	conf, err := os.ReadFile("../../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	b := &restartableBroker{
		broker: &broker{keys: dir, log: &testenv.NATSLog{}},
		conf:   filepath.Join(dir, "nats.conf"), store: t.TempDir(), port: -1,
	}
	b.start(t)
	return b
}

func (b *restartableBroker) start(t *testing.T) {
	t.Helper()
	opts, err := server.ProcessConfigFile(b.conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.Host, opts.Port = "127.0.0.1", b.port
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.JetStream, opts.StoreDir = true, b.store
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.SetLogger(b.log, false, false)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server: not ready after 10s")
	}
	t.Cleanup(s.Shutdown)
	b.srv, b.url, b.port = s, s.ClientURL(), s.Addr().(*net.TCPAddr).Port
}

// restart stops the broker and starts it again; clients reconnect.
func (b *restartableBroker) restart(t *testing.T) {
	t.Helper()
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
	b.start(t)
}

// How far a relay reaches, with the key of the one role that may still
// create consumers, the admitter's: records it stores in USHER_ADMISSIONS,
// each delivered by a push consumer of its own on a subject the server
// itself handles — an acknowledgement of the order request in the
// order worker's hands (empty, as nats.go sends one, and "+ACK"), the
// deletion of a downstream reader's consumer, the purge of one stream and
// the deletion of another.
//
// While the broker runs none is delivered: nats-server binds a push
// consumer only to a subscription on exactly its deliver subject, and the
// acknowledgements' internal subscriptions are wildcards, the JetStream
// API the system account's. After a restart a recovered push consumer may
// be bound by a subscription that merely matches, and delivers: the API
// drops a request that carries no client information (a stream strips it
// from what it stores), and the order worker's consumer does not take the
// relayed value for an acknowledgement. What a relay does reach are the
// literal subjects: a consumer's reset (see
// TestAPushConsumerStillReachesAnotherConsumersControlSubjects) and its
// next-message requests.
func TestHowFarARelayReaches(t *testing.T) {
	by := bus.Admitter
	b := newRestartableBroker(t)
	adm := b.declare(t)
	ctx := t.Context()
	relayer := b.as(t, by)
	q := testenv.Name(t)

	gw := b.as(t, bus.Gateway)
	for range 2 {
		if _, err := gw.js.Publish(ctx, event.OrderRequestedSubject(q), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gw.js.Publish(ctx, event.EnterSubject(q), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.js.Publish(ctx, event.AdmittedSubject(q), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	ow := b.as(t, bus.OrderWorker)
	work, err := ow.js.Consumer(ctx, event.StreamOrders, event.ConsumerOrderWorker)
	if err != nil {
		t.Fatal(err)
	}
	inFlight := pull(t, work)

	acked := func() bool {
		info, err := work.Info(ctx)
		return err == nil && info.NumAckPending == 0
	}
	reaches := []struct {
		what, deliver string
		body          []byte
		done          func() bool
	}{
		{"acknowledge the order request in the worker's hands", inFlight.Reply(), nil, acked},
		{"acknowledge it with +ACK", inFlight.Reply(), []byte("+ACK"), acked},
		{"delete the downstream reader's consumer", "$JS.API.CONSUMER.DELETE." + event.StreamAdmissions + "." + reader, nil, func() bool {
			_, err := adm.js.Consumer(ctx, event.StreamAdmissions, reader)
			return errors.Is(err, jetstream.ErrConsumerNotFound)
		}},
		{"purge USHER_ENTRIES", "$JS.API.STREAM.PURGE." + event.StreamEntries, []byte("{}"), func() bool {
			st, err := adm.js.Stream(ctx, event.StreamEntries)
			return err == nil && st.CachedInfo().State.Msgs == 0
		}},
		{"delete USHER_OPS", "$JS.API.STREAM.DELETE." + event.StreamOps, nil, func() bool {
			_, err := adm.js.Stream(ctx, event.StreamOps)
			return errors.Is(err, jetstream.ErrStreamNotFound)
		}},
	}
	var relays []relay
	for i, r := range reaches {
		subject := event.AdmittedSubject(q + "-" + strconv.Itoa(i))
		if _, err := relayer.js.Publish(ctx, subject, r.body); err != nil {
			t.Fatal(err)
		}
		name := "reach-" + strconv.Itoa(i)
		if _, err := createPush(relayer, event.StreamAdmissions, name, r.deliver, subject, time.Hour); err != nil {
			t.Fatalf("%s's push consumer to %s: %v", by, r.deliver, err)
		}
		relays = append(relays, relay{relayer, event.StreamAdmissions, name, r.deliver})
	}
	for i, rl := range relays {
		if info := rl.info(t); info.PushBound || info.Delivered.Stream != 0 || reaches[i].done() {
			t.Errorf("while the broker runs, the relay to %s is bound (%v) and delivered up to %d: it may %s",
				rl.target, info.PushBound, info.Delivered.Stream, reaches[i].what)
		}
	}

	b.restart(t)
	testenv.Eventually(t, 10*time.Second, func() bool { return adm.nc.IsConnected() && relayer.nc.IsConnected() && ow.nc.IsConnected() },
		"the clients reconnect")
	for i, rl := range relays {
		if !rl.info(t).PushBound {
			continue
		}
		testenv.Eventually(t, 5*time.Second, func() bool { return rl.info(t).Delivered.Stream > 0 }, "the relay to %s delivers", rl.target)
		t.Logf("after a restart the relay to %s delivered, to %s", rl.target, reaches[i].what)
	}
	// The worker's own acknowledgement of the next request, confirmed by
	// the server, is processed after anything relayed on its ack subject.
	if err := pull(t, work).DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	for i, r := range reaches {
		if r.done() {
			t.Errorf("after a restart the relay to %s did %s", relays[i].target, r.what)
		}
	}
}

// pull is the next message of cons, left unacknowledged.
func pull(t *testing.T, cons jetstream.Consumer) jetstream.Msg {
	t.Helper()
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := <-batch.Messages()
	if m == nil {
		t.Fatalf("nothing to pull: %v", batch.Error())
	}
	return m
}
