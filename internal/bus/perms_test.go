package bus_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/config"
	"usher/internal/event"
	"usher/internal/testenv"
)

// A broker configured from the policy lets nobody in without a key it
// knows.
func TestConnectingWithoutCredentialsIsRefused(t *testing.T) {
	b := newBroker(t)
	t.Run("no credentials", func(t *testing.T) {
		_, err := bus.Connect(bus.Settings{URLs: []string{b.url}}, "anonymous")
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("Connect without credentials = %v, want an authorization violation", err)
		}
	})
	t.Run("a key the server does not know", func(t *testing.T) {
		stranger := t.TempDir() + "/stranger.nk"
		if _, err := bus.LoadOrCreateKey(stranger); err != nil {
			t.Fatal(err)
		}
		_, err := bus.Connect(bus.Settings{URLs: []string{b.url}, NKeyFile: stranger}, "stranger")
		if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("Connect with an unknown key = %v, want an authorization violation", err)
		}
	})
	t.Run("another role's inbox", func(t *testing.T) {
		// The key is the gateway's, the reply subjects the admitter's: the
		// server refuses the subscription, so no reply can be read.
		s := b.settings(bus.Gateway)
		s.Role = bus.Admitter
		nc, err := bus.Connect(s, "impostor")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		if _, err := js.Stream(quick(t), event.StreamEntries); err == nil {
			t.Fatal("a request answered on another role's inbox")
		}
	})
}

// Only the admitter's key may publish an admission: anyone else's forged
// usher.admitted.<q> is refused by the broker and never stored.
func TestOnlyTheAdmitterPublishesAdmissions(t *testing.T) {
	b := newBroker(t)
	adm := b.declare(t)
	q := testenv.Name(t)
	for _, r := range policy.Roles() {
		c := adm
		if r != bus.Admitter {
			c = b.as(t, r)
		}
		body, _ := event.Marshal("forged-"+string(r), event.TypeAdmitted, "mallory", time.Now(),
			event.Admitted{Queue: q, User: "mallory", TokenID: "forged-" + string(r)})
		_, err := c.js.Publish(quick(t), event.AdmittedSubject(q), body)
		if r == bus.Admitter {
			if err != nil {
				t.Fatalf("the admitter's admission: %v", err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s published an admission and the stream stored it", r)
			continue
		}
		c.refused(t, event.AdmittedSubject(q))
	}
	st, err := adm.js.Stream(context.Background(), event.StreamAdmissions)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("USHER_ADMISSIONS holds %d admissions, want the admitter's one", n)
	}
}

// Each role is refused what it must not do: publish another's events,
// change the streams, write the catalog, read others' replies or others'
// durable consumers, read streams it has no business in.
func TestEachRoleIsRefusedWhatItMustNot(t *testing.T) {
	b := newBroker(t)
	b.declare(t)
	q := testenv.Name(t)
	publish := func(subject string) func(*client) error {
		return func(c *client) error {
			if err := c.nc.Publish(subject, []byte("{}")); err != nil {
				return err
			}
			return c.nc.Flush()
		}
	}
	subscribe := func(subject string) func(*client) error {
		return func(c *client) error {
			_, err := c.nc.SubscribeSync(subject)
			return err
		}
	}
	request := func(fn func(context.Context, jetstream.JetStream) error) func(*client) error {
		return func(c *client) error { return fn(quick(t), c.js) }
	}
	createConsumer := func(stream, name, filter string) func(*client) error {
		return request(func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: name, FilterSubject: filter})
			return err
		})
	}
	// Reading a seed, as the admitter reads one: a direct get of its key
	// (looking the bucket up first needs STREAM.INFO, refused as well to
	// every role but the admitter).
	readSeed := publish("$JS.API.DIRECT.GET." + event.StreamSeeds + "." + event.SeedSubject(q, "c0ffee"))
	seedGet := "$JS.API.DIRECT.GET." + event.StreamSeeds
	tests := []struct {
		role    bus.Role
		what    string
		do      func(*client) error
		refused string // the subject the server names in its refusal
	}{
		{bus.Gateway, "forge an admission", publish(event.AdmittedSubject(q)), event.AdmittedSubject(q)},
		{bus.Gateway, "announce an order outcome", publish(event.OrderCompletedSubject(q)), event.OrderCompletedSubject(q)},
		{bus.Gateway, "update a stream's retention", request(func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: event.StreamEntries, Subjects: []string{"usher.enter.*"}, MaxAge: time.Second})
			return err
		}), "$JS.API.STREAM.UPDATE." + event.StreamEntries},
		{bus.Gateway, "delete a stream", request(func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteStream(ctx, event.StreamEntries)
		}), "$JS.API.STREAM.DELETE." + event.StreamEntries},
		{bus.Gateway, "read the admitter's replies", subscribe(bus.Admitter.Inbox() + ".>"), bus.Admitter.Inbox() + ".>"},
		{bus.Gateway, "read every reply", subscribe("_INBOX.>"), "_INBOX.>"},
		{bus.Gateway, "listen to joins", subscribe(event.EnterSubject(event.All)), event.EnterSubject(event.All)},
		{bus.Gateway, "read the entries stream", createConsumer(event.StreamEntries, "peek", ""), "$JS.API.CONSUMER.CREATE." + event.StreamEntries + ".peek"},
		{bus.Admitter, "request an order", publish(event.OrderRequestedSubject(q)), event.OrderRequestedSubject(q)},
		{bus.Admitter, "join a shopper", publish(event.EnterSubject(q)), event.EnterSubject(q)},
		{bus.OrderWorker, "write the catalog (the admitter closes sold-out queues now)", publish("$KV." + event.BucketQueues + "." + q), "$KV." + event.BucketQueues + "." + q},
		{bus.Admitter, "purge a stream", request(func(ctx context.Context, js jetstream.JetStream) error {
			st, err := js.Stream(ctx, event.StreamEntries)
			if err != nil {
				return err
			}
			return st.Purge(ctx)
		}), "$JS.API.STREAM.PURGE." + event.StreamEntries},
		{bus.Admitter, "pull the order worker's requests", publish("$JS.API.CONSUMER.MSG.NEXT." + event.StreamOrders + "." + event.ConsumerOrderWorker),
			"$JS.API.CONSUMER.MSG.NEXT." + event.StreamOrders + "." + event.ConsumerOrderWorker},
		{bus.Admitter, "delete the order worker's consumer", request(func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteConsumer(ctx, event.StreamOrders, event.ConsumerOrderWorker)
		}), "$JS.API.CONSUMER.DELETE." + event.StreamOrders + "." + event.ConsumerOrderWorker},
		{bus.Admitter, "pull the downstream reader's admissions", publish("$JS.API.CONSUMER.MSG.NEXT." + event.StreamAdmissions + "." + reader),
			"$JS.API.CONSUMER.MSG.NEXT." + event.StreamAdmissions + "." + reader},
		{bus.Notifier, "join a shopper", publish(event.EnterSubject(q)), event.EnterSubject(q)},
		{bus.Notifier, "forge an admission", publish(event.AdmittedSubject(q)), event.AdmittedSubject(q)},
		{bus.Notifier, "record a config change", publish(event.ConfigChangedSubject), event.ConfigChangedSubject},
		{bus.Notifier, "write the catalog", publish("$KV." + event.BucketQueues + "." + q), "$KV." + event.BucketQueues + "." + q},
		{bus.Notifier, "listen to joins", subscribe(event.EnterSubject(event.All)), event.EnterSubject(event.All)},
		{bus.Notifier, "create a stream", request(func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SHADOW", Subjects: []string{"shadow.>"}})
			return err
		}), "$JS.API.STREAM.CREATE.SHADOW"},
		{bus.OrderWorker, "forge an admission", publish(event.AdmittedSubject(q)), event.AdmittedSubject(q)},
		{bus.OrderWorker, "request an order", publish(event.OrderRequestedSubject(q)), event.OrderRequestedSubject(q)},
		{bus.OrderWorker, "listen to order events", subscribe("usher.order.>"), "usher.order.>"},
		{bus.OrderWorker, "read the admissions stream", createConsumer(event.StreamAdmissions, "peek", ""), "$JS.API.CONSUMER.CREATE." + event.StreamAdmissions + ".peek"},
		{bus.OrderWorker, "change its own consumer (the admitter declares it)", createConsumer(event.StreamOrders, event.ConsumerOrderWorker, event.OrderRequestedSubject(event.All)),
			"$JS.API.CONSUMER.CREATE." + event.StreamOrders + "." + event.ConsumerOrderWorker},
		{bus.OrderWorker, "delete its own consumer", request(func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteConsumer(ctx, event.StreamOrders, event.ConsumerOrderWorker)
		}), "$JS.API.CONSUMER.DELETE." + event.StreamOrders + "." + event.ConsumerOrderWorker},
		{bus.Downstream(reader), "change its own consumer (the admitter declares it)", createConsumer(event.StreamAdmissions, reader, event.AdmittedSubject("q")),
			"$JS.API.CONSUMER.CREATE." + event.StreamAdmissions + "." + reader},
		{bus.Usherctl, "forge an admission", publish(event.AdmittedSubject(q)), event.AdmittedSubject(q)},
		{bus.Usherctl, "republish into the record", publish(event.EnterSubject(q)), event.EnterSubject(q)},
		{bus.Usherctl, "write the catalog", publish("$KV." + event.BucketQueues + "." + q), "$KV." + event.BucketQueues + "." + q},
		{bus.Usherctl, "ack the order worker's requests", publish("$JS.ACK." + event.StreamOrders + "." + event.ConsumerOrderWorker + ".1.1.1.1.1.0"),
			"$JS.ACK." + event.StreamOrders + "." + event.ConsumerOrderWorker},
		{bus.Usherctl, "reply as the gateway's broker", publish(bus.Gateway.Inbox() + ".x.y"), bus.Gateway.Inbox() + ".x.y"},
		{bus.Downstream(reader), "forge an admission", publish(event.AdmittedSubject(q)), event.AdmittedSubject(q)},
		{bus.Downstream(reader), "read the entries stream", createConsumer(event.StreamEntries, reader, ""),
			"$JS.API.CONSUMER.CREATE." + event.StreamEntries + "." + reader},
		{bus.Downstream(reader), "read admissions under another name", createConsumer(event.StreamAdmissions, "other", event.AdmittedSubject(q)),
			"$JS.API.CONSUMER.CREATE." + event.StreamAdmissions + ".other"},
		{bus.Downstream(reader), "read the orders stream", createConsumer(event.StreamOrders, reader, ""),
			"$JS.API.CONSUMER.CREATE." + event.StreamOrders + "." + reader},
		{bus.Downstream(reader), "look at a stream", request(func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.Stream(ctx, event.StreamEntries)
			return err
		}), "$JS.API.STREAM.INFO." + event.StreamEntries},
		{bus.Downstream(reader), "read the catalog", request(func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.KeyValue(ctx, event.BucketQueues)
			return err
		}), "$JS.API.STREAM.INFO." + event.StreamQueues},
		{bus.Gateway, "read a lottery seed (it writes them)", readSeed, seedGet},
		{bus.Notifier, "read a lottery seed", readSeed, seedGet},
		{bus.OrderWorker, "read a lottery seed", readSeed, seedGet},
		{bus.Usherctl, "read a lottery seed", readSeed, seedGet},
		{bus.Downstream(reader), "read a lottery seed", readSeed, seedGet},
		{bus.Admitter, "write a lottery seed", publish(event.SeedSubject(q, "c0ffee")), event.SeedSubject(q, "c0ffee")},
		{bus.Usherctl, "write a lottery seed", publish(event.SeedSubject(q, "c0ffee")), event.SeedSubject(q, "c0ffee")},
		{bus.Downstream(reader), "listen to admissions live", subscribe(event.AdmittedSubject(">")), event.AdmittedSubject(">")},
		{bus.Downstream(reader), "listen to the admissions the stream republishes", subscribe(event.Live(event.AdmittedSubject(">"))), event.Live(event.AdmittedSubject(">"))},
		{bus.Notifier, "subscribe to a stored subject (a push consumer would deliver into the stream)", subscribe(event.AdmittedSubject(q)), event.AdmittedSubject(q)},
		{bus.Notifier, "subscribe to order events as stored", subscribe(event.OrderCompletedSubject(q)), event.OrderCompletedSubject(q)},
		{bus.Admitter, "publish a live admission (only the stream republishes one)", publish(event.Live(event.AdmittedSubject(q))), event.Live(event.AdmittedSubject(q))},
		{bus.Downstream(reader), "read the order worker's replies", subscribe(bus.OrderWorker.Inbox() + ".>"), bus.OrderWorker.Inbox() + ".>"},
	}
	// No role but the admitter may create a consumer, of any kind, on any
	// stream or bucket: a push consumer delivers on any subject it names
	// (see TestNoRoleButTheAdmitterMayCreateAConsumer).
	for _, r := range policy.Roles() {
		if r == bus.Admitter {
			continue
		}
		for _, stream := range []string{event.StreamEntries, event.StreamAdmissions, event.StreamOrders, event.StreamOps,
			event.StreamQueues, event.StreamSeeds} {
			for _, subject := range []string{"$JS.API.CONSUMER.CREATE." + stream + ".any",
				"$JS.API.CONSUMER.CREATE." + stream + ".any." + event.EnterSubject(q),
				"$JS.API.CONSUMER.CREATE." + stream, "$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".any"} {
				tests = append(tests, struct {
					role    bus.Role
					what    string
					do      func(*client) error
					refused string
				}{r, "create a consumer: " + subject, publish(subject), subject})
			}
		}
	}
	clients := map[bus.Role]*client{}
	for _, r := range policy.Roles() {
		clients[r] = b.as(t, r)
	}
	for _, tt := range tests {
		t.Run(string(tt.role)+" may not "+tt.what, func(t *testing.T) {
			c := clients[tt.role]
			err := tt.do(c)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) &&
				!strings.Contains(err.Error(), "timeout") {
				t.Logf("%s: %v", tt.what, err)
			}
			c.refused(t, tt.refused)
		})
	}
	if t.Failed() {
		t.Logf("server log:\n%s", strings.Join(b.log.Violations(), "\n"))
	}
}

// Each role, connected with its own key, can do all its service does —
// through the same code the services run: bus.Open (declaring, or waiting
// for the admitter), the catalog, the stream identities, its publishes,
// consumers and subscriptions — and the broker refuses it nothing.
func TestEachRoleMayDoWhatItNeeds(t *testing.T) {
	b := newBroker(t)
	ctx := t.Context()
	q := testenv.Name(t)
	open := func(r bus.Role) (*nats.Conn, jetstream.JetStream) {
		t.Helper()
		nc, js, err := bus.Open(ctx, b.settings(r), "test-"+string(r))
		if err != nil {
			t.Fatalf("open as %s: %v", r, err)
		}
		t.Cleanup(nc.Close)
		if _, err := bus.NewIdentities(ctx, js, nil); err != nil {
			t.Fatalf("%s reads the streams' identities: %v", r, err)
		}
		return nc, js
	}
	pub := func(r bus.Role, js jetstream.JetStream, subject string) {
		t.Helper()
		body, _ := event.Marshal(subject, "test", "x", time.Now(), struct{}{})
		if _, err := js.Publish(ctx, subject, body); err != nil {
			t.Fatalf("%s publishes %s: %v", r, subject, err)
		}
	}

	// The admitter declares; the gateway, started first, waits for it.
	gwReady := make(chan jetstream.JetStream, 1)
	go func() {
		nc, js, err := bus.Open(ctx, b.settings(bus.Gateway), "test-gateway")
		if err != nil {
			t.Errorf("gateway: %v", err)
			close(gwReady)
			return
		}
		t.Cleanup(nc.Close)
		gwReady <- js
	}()
	_, admJS := open(bus.Admitter)
	if _, err := catalog.Open(ctx, admJS, 1); err != nil {
		t.Fatalf("the admitter declares the catalog and the seeds' bucket: %v", err)
	}
	if err := bus.EnsureDurables(ctx, admJS, policy.Durables(bus.OrderWork{AckWait: 30 * time.Second, MaxAckPending: 64})); err != nil {
		t.Fatalf("the admitter declares the durable consumers: %v", err)
	}
	gwJS := <-gwReady
	if gwJS == nil {
		t.FailNow()
	}

	t.Run("gateway", func(t *testing.T) {
		cat, err := catalog.Attach(ctx, gwJS)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cat.Put(ctx, catalog.Defaults(q)); err != nil {
			t.Fatalf("gateway stores a queue: %v", err)
		}
		if _, err := cat.Put(ctx, catalog.Defaults(q)); err != nil {
			t.Fatalf("gateway changes a queue: %v", err)
		}
		for _, s := range []string{event.EnterSubject(q), event.LeaveSubject(q), event.OrderRequestedSubject(q), event.ConfigChangedSubject} {
			pub(bus.Gateway, gwJS, s)
		}
		// A scheduled drop's seed, as the gateway stores it.
		if _, err := gwJS.Publish(ctx, event.SeedSubject(q, "c0ffee"), []byte("5eed")); err != nil {
			t.Fatalf("gateway stores a lottery seed: %v", err)
		}
	})
	var notified chan *nats.Msg
	var notifierCat *catalog.Catalog
	t.Run("notifier", func(t *testing.T) {
		nc, js := open(bus.Notifier)
		cat, err := catalog.Attach(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		notifierCat = cat
		go cat.Run(ctx)
		testenv.Eventually(t, 5*time.Second, func() bool { _, ok := cat.Get(q); return ok }, "notifier sees queue %s", q)
		notified = make(chan *nats.Msg, 16)
		for _, s := range []string{event.Live(event.AdmittedSubject(event.All)), event.Live(event.LeaveSubject(event.All)), event.Live(event.OrderSubjects(event.All))} {
			if _, err := nc.ChanSubscribe(s, notified); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("admitter", func(t *testing.T) {
		pub(bus.Admitter, admJS, event.AdmittedSubject(q))
		pub(bus.Admitter, admJS, event.LeaveSubject(q)) // a shopper found gone
		// The followers: ordered consumers on three streams, from the start.
		for _, f := range []struct{ stream, subject string }{
			{event.StreamEntries, event.EnterSubject(q)},
			{event.StreamAdmissions, event.AdmittedSubject(q)},
			{event.StreamOrders, event.OrderSubjects(q)},
		} {
			cons, err := admJS.OrderedConsumer(ctx, f.stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{f.subject}})
			if err != nil {
				t.Fatalf("ordered consumer on %s: %v", f.stream, err)
			}
			if _, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil {
				t.Fatalf("read %s: %v", f.stream, err)
			}
		}
		// The heads: the last admission and order event of a queue.
		st, err := admJS.Stream(ctx, event.StreamOrders)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.GetLastMsgForSubject(ctx, event.OrderSubjects(q)); err != nil {
			t.Fatalf("last order event: %v", err)
		}
		// Its old ingest consumer, deleted at start-up.
		if err := admJS.DeleteConsumer(ctx, event.StreamEntries, "admitter"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("delete the old ingest consumer = %v, want not found", err)
		}
		// It closes a sold-out queue (compare-and-set) and audits it.
		cat, err := catalog.Attach(ctx, admJS)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := cat.Update(ctx, q, func(c *catalog.Config) bool {
			c.State, c.ClosedReason = catalog.StateClosed, catalog.ReasonSoldOut
			return true
		}); err != nil {
			t.Fatalf("admitter closes a sold-out queue: %v", err)
		}
		pub(bus.Admitter, admJS, event.ConfigChangedSubject)
		// It reads the seed of the lottery it draws.
		seed, err := catalog.SeedOf(ctx, admJS, q, catalog.Lottery{Commitment: "c0ffee"})
		if err != nil || seed != "5eed" {
			t.Fatalf("admitter reads the lottery seed = %q, %v; want 5eed", seed, err)
		}
	})
	t.Run("notifier hears admissions, leaves and orders", func(t *testing.T) {
		// The admitter's change of the catalog, as the bucket republished it.
		testenv.Eventually(t, 5*time.Second, func() bool {
			cfg, _ := notifierCat.Get(q)
			return cfg.State == catalog.StateClosed
		}, "the notifier's catalog sees the queue closed")
		for _, want := range []string{event.Live(event.AdmittedSubject(q)), event.Live(event.LeaveSubject(q))} {
			select {
			case m := <-notified:
				if m.Subject != want {
					t.Errorf("notifier got %s, want %s", m.Subject, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("notifier never got %s", want)
			}
		}
	})
	t.Run("orderworker", func(t *testing.T) {
		_, js := open(bus.OrderWorker)
		cat, err := catalog.Attach(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := cat.Get(q); !ok {
			t.Fatalf("orderworker reads queue %s", q)
		}
		// It reads an order's admission back by its stream sequence, as
		// the worker does before it charges the order (the admitter's one).
		adm, err := js.Stream(ctx, event.StreamAdmissions)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := adm.GetMsg(ctx, 1); err != nil || m.Subject != event.AdmittedSubject(q) {
			t.Fatalf("orderworker reads admission 1: %v, %v", m, err)
		}
		cons, err := bus.BindDurable(ctx, js, event.StreamOrders, event.ConsumerOrderWorker, nil)
		if err != nil {
			t.Fatalf("bind to the durable consumer: %v", err)
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("pull an order request: %v", err)
		}
		if err := m.InProgress(); err != nil {
			t.Fatal(err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("ack an order request: %v", err)
		}
		if _, err := cons.Info(ctx); err != nil {
			t.Fatalf("consumer lag: %v", err)
		}
		pub(bus.OrderWorker, js, event.OrderCompletedSubject(q))
		pub(bus.OrderWorker, js, event.OrderFailedSubject(q))
		select {
		case <-notified:
		case <-time.After(5 * time.Second):
			t.Fatal("the notifier never heard the order outcome")
		}
	})
	t.Run("usherctl", func(t *testing.T) {
		c := b.as(t, bus.Usherctl)
		for _, s := range []string{event.StreamEntries, event.StreamAdmissions, event.StreamOrders, event.StreamOps} {
			st, err := c.js.Stream(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Info(ctx, jetstream.WithSubjectFilter(">")); err != nil {
				t.Fatalf("info of %s: %v", s, err)
			}
			// Replay: batches of direct gets, and the leader's last event.
			n := 0
			if _, err := bus.Get(ctx, c.nc, s, bus.GetRequest{Subject: ">", Batch: 16}, func(bus.Stored) error { n++; return nil }); err != nil || n == 0 {
				t.Fatalf("replay %s: %d events, %v", s, n, err)
			}
			if _, err := c.nc.Request("$JS.API.STREAM.MSG.GET."+s, []byte(`{"last_by_subj":">"}`), 5*time.Second); err != nil {
				t.Fatalf("last event of %s: %v", s, err)
			}
		}
		kv, err := c.js.KeyValue(ctx, catalog.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Get(ctx, q); err != nil {
			t.Fatalf("audit reads the catalog: %v", err)
		}
		if _, err := c.js.StreamNameBySubject(ctx, "replay."+reader+".x"); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("which stream stores a republish subject = %v, want none", err)
		}
		rd := b.as(t, bus.Downstream(reader))
		sub, err := rd.nc.SubscribeSync(event.ReplaySubject(reader))
		if err != nil {
			t.Fatal(err)
		}
		if err := rd.nc.Flush(); err != nil { // the server has the subscription
			t.Fatal(err)
		}
		if err := c.nc.Publish("replay."+reader+".admissions", []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.NextMsg(5 * time.Second); err != nil {
			t.Fatalf("the reader's republished events: %v", err)
		}
	})
	t.Run("downstream reader", func(t *testing.T) {
		c := b.as(t, bus.Downstream(reader))
		cons, err := bus.BindDurable(ctx, c.js, event.StreamAdmissions, reader, nil)
		if err != nil {
			t.Fatalf("bind to its durable consumer: %v", err)
		}
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("read an admission: %v", err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("ack an admission: %v", err)
		}
	})
	if v := b.log.Violations(); len(v) > 0 {
		t.Errorf("the broker refused what a role needs:\n%s", strings.Join(v, "\n"))
	}
}

// Without a key configured, a role's key in the data folder is used when
// the server asks for one, and left out when the server authenticates
// nobody (the unit tests' and the fault harness's servers); a key
// configured explicitly is never left out.
func TestTheDataFolderKeyIsUsedWhenTheServerAsks(t *testing.T) {
	data := t.TempDir()
	if _, err := bus.LoadOrCreateKey(bus.DefaultKeyFile(data, bus.Gateway)); err != nil {
		t.Fatal(err)
	}
	env := func(url, keyFile string) bus.Settings {
		m := map[string]string{"USHER_NATS_URL": url, "USHER_DATA_DIR": data, "USHER_NATS_NKEY_FILE": keyFile}
		return bus.LoadSettings(config.New(func(k string) string { return m[k] })).As(bus.Gateway, nil)
	}
	open := testenv.NATS(t)
	nc, err := bus.Connect(env(open, ""), "default-key")
	if err != nil {
		t.Fatalf("default key, server without auth: %v", err)
	}
	nc.Close()
	if _, err := bus.Connect(env(open, bus.DefaultKeyFile(data, bus.Gateway)), "explicit-key"); !errors.Is(err, nats.ErrNkeysNotSupported) {
		t.Fatalf("explicit key, server without auth = %v, want %v", err, nats.ErrNkeysNotSupported)
	}

	// On a server that knows the key, the default is the role's identity.
	dir := t.TempDir()
	if _, err := bus.WriteAuth(bus.Policy{}, dir, func(r bus.Role) string { return bus.DefaultKeyFile(data, r) }); err != nil {
		t.Fatal(err)
	}
	authed := testenv.NATSFromConfig(t, dir+"/"+bus.AuthFile, nil).ClientURL()
	nc, err = bus.Connect(env(authed, ""), "default-key")
	if err != nil {
		t.Fatalf("default key, server with auth: %v", err)
	}
	defer nc.Close()
	kp, _ := nkeys.ParseDecoratedNKey(mustRead(t, bus.DefaultKeyFile(data, bus.Gateway)))
	pub, _ := kp.PublicKey()
	if nc.Opts.Nkey != pub {
		t.Errorf("connected as %q, want the gateway's key %q", nc.Opts.Nkey, pub)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Under auth only the admitter declares the streams and the catalog: any
// other role waits for them, trying nothing the broker would refuse, and
// starts as soon as they exist.
func TestOtherRolesWaitForTheAdmittersStreams(t *testing.T) {
	b := newBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, _, err := bus.Open(ctx, b.settings(bus.Notifier), "early-notifier"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("notifier Open before the admitter = %v, want it to wait until its deadline", err)
	}
	opened := make(chan error, 1)
	go func() {
		nc, _, err := bus.Open(t.Context(), b.settings(bus.Gateway), "waiting-gateway")
		if err == nil {
			nc.Close()
		}
		opened <- err
	}()
	b.declare(t)
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("gateway Open once the admitter declared: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gateway still waiting 10s after the admitter declared the streams")
	}
	if v := b.log.Violations(); len(v) > 0 {
		t.Errorf("a waiting role tried what it may not:\n%s", strings.Join(v, "\n"))
	}
}

// Under auth the order worker and a downstream reader bind to the durable
// consumer the admitter declares: each waits for it, trying nothing the
// broker would refuse, and binds as soon as it exists.
func TestReadersWaitForTheDurablesTheAdmitterDeclares(t *testing.T) {
	b := newBroker(t)
	adm := b.as(t, bus.Admitter)
	if err := bus.EnsureStreams(t.Context(), adm.js, 1); err != nil {
		t.Fatal(err)
	}
	bound := make(chan error, 2)
	for _, c := range []struct {
		role         bus.Role
		stream, name string
	}{{bus.OrderWorker, event.StreamOrders, event.ConsumerOrderWorker}, {bus.Downstream(reader), event.StreamAdmissions, reader}} {
		js := b.as(t, c.role).js
		go func() {
			_, err := bus.BindDurable(t.Context(), js, c.stream, c.name, nil)
			bound <- err
		}()
	}
	select {
	case err := <-bound:
		t.Fatalf("bound before the admitter declared anything: %v", err)
	case <-time.After(time.Second):
	}
	if err := bus.EnsureDurables(t.Context(), adm.js, policy.Durables(bus.OrderWork{AckWait: time.Minute, MaxAckPending: 10})); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-bound:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("still waiting 10s after the admitter declared the durables")
		}
	}
	if v := b.log.Violations(); len(v) > 0 {
		t.Errorf("a binding role tried what it may not:\n%s", strings.Join(v, "\n"))
	}
}
