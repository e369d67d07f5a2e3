package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"usher/internal/testenv"
	"usher/internal/waitqueue"
)

// trickleFirst is the broker as a follower meets it when NATS places its
// first consumer on a replica that is still catching up: that consumer
// delivers what the stream holds one event a second, never silent and
// always behind; the consumers made after it are the stream's own.
type trickleFirst struct {
	jetstream.JetStream
	made atomic.Int32
}

func (t *trickleFirst) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	c, err := t.JetStream.OrderedConsumer(ctx, stream, cfg)
	if err != nil || t.made.Add(1) > 1 {
		return c, err
	}
	return trickle{c}, nil
}

type trickle struct{ jetstream.Consumer }

func (c trickle) Consume(h jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (jetstream.ConsumeContext, error) {
	held := make(chan jetstream.Msg, 1024)
	tc := &trickleContext{stop: make(chan struct{})}
	cc, err := c.Consumer.Consume(func(m jetstream.Msg) {
		select {
		case held <- m:
		case <-tc.stop:
		}
	}, opts...)
	if err != nil {
		return nil, err
	}
	tc.ConsumeContext = cc
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tc.stop:
				return
			case <-tick.C:
			}
			select {
			case m := <-held:
				h(m)
			default:
			}
		}
	}()
	return tc, nil
}

type trickleContext struct {
	jetstream.ConsumeContext
	stop chan struct{}
	once sync.Once
}

func (tc *trickleContext) Stop() {
	tc.once.Do(func() { close(tc.stop) })
	tc.ConsumeContext.Stop()
}

// A consumer that keeps delivering but lags the stream's leader — an
// event the leader held two seconds ago still not delivered while the
// admission ticks find the line behind — is replaced: the line does not
// wait for a lagging replica to catch up, one event at a time.
func TestALaggingConsumerIsReplaced(t *testing.T) {
	w := newWorld(t, cfg(5, 20, 300))
	js := &trickleFirst{JetStream: w.js}
	const shoppers = 20 // twenty seconds at the lagging consumer's pace
	seqs := make([]uint64, shoppers)
	for i := range seqs {
		seqs[i] = w.join(fmt.Sprintf("shopper-%d", i))
	}
	f := entriesFollower(followingAdmitter(t, w, js), w.queue)
	follow(t, f)
	// The admission ticks' kicks, as while the line is behind.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			f.Kick()
			sleep(ctx, 100*time.Millisecond)
		}
	}()

	testenv.Eventually(t, 10*time.Second, func() bool { return w.status(seqs[shoppers-1]) == waitqueue.Waiting },
		"the last of %d shoppers in line", shoppers)
	if n := js.made.Load(); n < 2 {
		t.Fatalf("%d consumer(s) made; want the lagging one replaced", n)
	}
}
