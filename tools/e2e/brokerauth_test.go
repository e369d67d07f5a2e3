package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/bus"
	"usher/internal/event"
	"usher/internal/testenv"
)

// The whole journey on make run's broker — nats.conf with the auth.conf
// `usherctl nats-auth` writes — with every service connecting with its own
// NKey, found in the data folder where make run puts it, and holding only
// its own permissions: a shopper joins, is admitted, gets READY (polled
// and pushed), orders and pays, and the next shopper is admitted. The
// broker refuses the services nothing; it refuses a connection without
// credentials, an admission forged with any key but the admitter's,
// every key but the admitter's the creation of a consumer (a push
// consumer's relay), and every key the subscription a relay into a stream
// needs.
func TestJourneyUnderLeastPrivilege(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	natsURL, brokerLog := leastPrivilegeBroker(t, data)

	gw, adm, nt, ow, pg := addr(t), addr(t), addr(t), addr(t), addr(t)
	env := map[string]string{
		"USHER_NATS_URL":         natsURL,
		"USHER_REDIS_URL":        ownRedis(t),
		"USHER_DATABASE_URL":     testenv.PostgresURL(t),
		"USHER_DATA_DIR":         data, // each service's key: <data>/nats/<service>.nk
		"USHER_GATEWAY_ADDR":     gw,
		"USHER_ADMITTER_ADDR":    adm,
		"USHER_NOTIFIER_ADDR":    nt,
		"USHER_ORDERWORKER_ADDR": ow,
		"USHER_PAYMENT_URL":      "http://" + pg,
		"PGSIM_ADDR":             pg,
		"PGSIM_LATENCY_MEAN_MS":  "5",
		"USHER_ADMIN_TOKEN":      "e2e-admin",
		// The reader nats-auth gives a key: the admitter declares its
		// durable consumer.
		"USHER_DOWNSTREAM_READERS": "example-downstream",
	}
	// The admitter starts last: the others wait for the streams it declares.
	for _, name := range []string{"pgsim", "gateway", "notifier", "orderworker", "admitter"} {
		start(t, name, env)
	}
	base := "http://" + gw
	waitReady(t, 30*time.Second, base, "http://"+adm, "http://"+nt, "http://"+ow)
	q := oneSlotQueue(t, base)
	tickets := [2]string{joinLine(t, base, q, "ann"), joinLine(t, base, q, "ben")}
	// READY pushed by the notifier, then polled from the gateway.
	openTab(t, "http://"+nt+"/v1/queues/"+q+"/tickets/"+tickets[0]+"/events").await(t, "ready", 15*time.Second)
	var token string
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tickets[0], "", nil)
		token, _ = body["token"].(string)
		return body["status"] == "READY"
	}, "ann READY")
	orderPaid(t, base, "ann", token)
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, body := call(t, "GET", base+"/v1/queues/"+q+"/tickets/"+tickets[1], "", nil)
		return body["status"] == "READY"
	}, "ben admitted once ann's order finished")
	if v := brokerLog.Violations(); len(v) > 0 {
		t.Fatalf("the broker refused the services what they need:\n%s", strings.Join(v, "\n"))
	}

	// Nobody gets in without credentials.
	if _, err := nats.Connect(natsURL); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("connect without credentials = %v, want an authorization violation", err)
	}
	// An admission forged with the gateway's (or the notifier's, or the
	// order worker's) key is refused, and the stream holds only the two
	// the admitter published.
	for _, r := range []bus.Role{bus.Gateway, bus.Notifier, bus.OrderWorker} {
		s := bus.Settings{URLs: []string{natsURL}, Role: r, NKeyFile: bus.DefaultKeyFile(data, r)}
		nc, err := bus.Connect(s, "forger")
		if err != nil {
			t.Fatal(err)
		}
		refused := make(chan error, 8)
		nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { refused <- err })
		js, _ := jetstream.New(nc)
		body, _ := event.Marshal("forged", event.TypeAdmitted, "mallory", time.Now(),
			event.Admitted{Queue: q, User: "mallory", TokenID: "forged"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = js.Publish(ctx, event.AdmittedSubject(q), body)
		cancel()
		if err == nil {
			t.Errorf("%s published a forged admission", r)
		}
		select {
		case err := <-refused:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Errorf("%s's forged admission: %v, want a permissions violation", r, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s's forged admission: the broker did not refuse it", r)
		}
		nc.Close()
	}
	ctl, err := bus.Connect(bus.Settings{URLs: []string{natsURL}, Role: bus.Usherctl, NKeyFile: bus.DefaultKeyFile(data, bus.Usherctl)}, "audit")
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	js, _ := jetstream.New(ctl)
	st, err := js.Stream(context.Background(), event.StreamAdmissions)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(event.AdmittedSubject(q)))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[event.AdmittedSubject(q)]; n != 2 {
		t.Errorf("USHER_ADMISSIONS holds %d admissions of %s, want ann's and ben's", n, q)
	}

	relayIsRefused(t, natsURL, data, js)
}

// relayIsRefused tries a relay through a push consumer (docs/security.md,
// Attacks tried, row 61) with every role's key after a journey: a push
// consumer on USHER_ADMISSIONS delivering on usher.order.completed.zz
// (the request `nats consumer add --deliver` sends). No key but the admitter's may create a consumer at all, so each
// is refused and none is created; every role then subscribes to that
// subject, which would make a push consumer the admitter's key created
// deliver there — and USHER_ORDERS store admissions. The broker refuses
// each subscription, and USHER_ORDERS holds order events only.
func relayIsRefused(t *testing.T, natsURL, data string, ctl jetstream.JetStream) {
	t.Helper()
	const deliver = "usher.order.completed.zz"
	roles := append([]bus.Role{}, bus.Services...)
	roles = append(roles, bus.Downstream("example-downstream"))
	conns := map[bus.Role]*nats.Conn{}
	refused := map[bus.Role]chan error{}
	for _, r := range roles {
		s := bus.Settings{URLs: []string{natsURL}, Role: r, NKeyFile: bus.DefaultKeyFile(data, r)}
		nc, err := bus.Connect(s, "relay-"+string(r))
		if err != nil {
			t.Fatalf("connect as %s: %v", r, err)
		}
		t.Cleanup(nc.Close)
		refused[r] = make(chan error, 8)
		nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { refused[r] <- err })
		conns[r] = nc
	}
	isRefused := func(r bus.Role, what string) {
		t.Helper()
		select {
		case err := <-refused[r]:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Errorf("%s %s: %v, want a permissions violation", r, what, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s %s: the broker did not refuse it", r, what)
		}
	}
	for _, r := range roles {
		if r == bus.Admitter {
			continue
		}
		name := "zz" + strings.ReplaceAll(string(r), "-", "")
		req := `{"stream_name":"USHER_ADMISSIONS","config":{"name":"` + name + `","deliver_subject":"` + deliver +
			`","deliver_policy":"all","ack_policy":"none","replay_policy":"instant"}}`
		if m, err := conns[r].Request("$JS.API.CONSUMER.CREATE.USHER_ADMISSIONS."+name, []byte(req), time.Second); err == nil {
			t.Errorf("%s created a push consumer to %s: %s", r, deliver, m.Data)
		}
		isRefused(r, "creates a push consumer")
		if info, err := ctlConsumer(conns[bus.Admitter], name); err == nil {
			t.Errorf("%s's push consumer exists: %+v", r, info)
		}
	}
	for _, r := range roles {
		if _, err := conns[r].SubscribeSync(deliver); err != nil {
			t.Fatal(err)
		}
		isRefused(r, "subscribes to "+deliver)
	}
	st, err := ctl.Stream(context.Background(), event.StreamOrders)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	for subject := range info.State.Subjects {
		if !strings.HasPrefix(subject, "usher.order.") {
			t.Errorf("USHER_ORDERS stored a record on %s", subject)
		}
	}
}

// ctlConsumer is consumer name of USHER_ADMISSIONS as the admitter's key
// reads it.
func ctlConsumer(nc *nats.Conn, name string) (*jetstream.ConsumerInfo, error) {
	m, err := nc.Request("$JS.API.CONSUMER.INFO.USHER_ADMISSIONS."+name, nil, 5*time.Second)
	if err != nil {
		return nil, err
	}
	var resp struct {
		jetstream.ConsumerInfo
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
	return &resp.ConsumerInfo, nil
}

// leastPrivilegeBroker starts make run's broker — nats.conf with the
// auth.conf `usherctl nats-auth` writes, each role's key in data as the
// services look for it — and returns its URL and its log.
func leastPrivilegeBroker(t *testing.T, data string) (string, *testenv.NATSLog) {
	t.Helper()
	natsDir := filepath.Join(data, "nats")
	gen := exec.Command(filepath.Join(bins, "usherctl"), "nats-auth",
		"--dir", natsDir, "--base", "../../nats.conf", "--downstream", "example-downstream")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("usherctl nats-auth: %v\n%s", err, out)
	}
	brokerLog := &testenv.NATSLog{}
	return testenv.NATSFromConfig(t, filepath.Join(natsDir, "nats.conf"), brokerLog).ClientURL(), brokerLog
}
