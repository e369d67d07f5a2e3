package bus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"usher/internal/testenv"
)

// gauges gathers reg and returns each series' value by metric name.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// The collector reports what the server says of the consumer at scrape
// time: stored but undelivered, and delivered but unacknowledged.
func TestLagCollectorReportsTheConsumerBacklog(t *testing.T) {
	ctx := context.Background()
	nc, err := Connect(Settings{URLs: []string{testenv.NATS(t)}}, "lag-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := "LAG_" + testenv.Name(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"lag." + stream}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "lag."+stream, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewLagCollector(stream, "worker", cons, 5*time.Second))

	want := map[string]float64{"usher_consumer_pending_messages": 2, "usher_consumer_ack_pending_messages": 1}
	var got map[string]float64
	testenv.Eventually(t, 10*time.Second, func() bool {
		got = gauges(t, reg)
		return got["usher_consumer_pending_messages"] == 2 && got["usher_consumer_ack_pending_messages"] == 1
	}, "lag = %v, want %v", got, want)

	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["stream"] != stream || labels["consumer"] != "worker" {
				t.Errorf("%s labels = %v, want stream=%s consumer=worker", mf.GetName(), labels, stream)
			}
		}
	}
}

type brokenConsumer struct{}

func (brokenConsumer) Info(context.Context) (*jetstream.ConsumerInfo, error) {
	return nil, errors.New("no responders")
}

// A scrape that cannot reach the server leaves the series out instead of
// reporting a backlog of zero.
func TestLagCollectorOmitsWhatItCannotRead(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewLagCollector("S", "c", brokenConsumer{}, time.Second))
	if got := gauges(t, reg); len(got) != 0 {
		t.Errorf("gathered %v from an unreachable consumer, want nothing", got)
	}
}
