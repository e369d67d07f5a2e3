package main

import (
	"context"
	"errors"
	"runtime"
	"sync"

	"usher/internal/token"
)

// minter signs entry tokens on a few long-lived goroutines.
//
// A stream goroutine spends its life parked, and while it is the garbage
// collector shrinks its stack to the minimum: that is most of what an idle
// stream costs (see streams.serve). An Ed25519 signature needs several KiB
// of stack, so signed on the stream's own goroutine every READY first grew
// that stack two or three times, copying it each time — at 19,000 streams
// the copying cost as much CPU as the signatures, on the path READY latency
// is measured on. The minter's goroutines keep their grown stacks; a stream
// hands over the claims and waits for the token.
type minter struct {
	keys *token.Keyring
	reqs chan mintRequest
	done <-chan struct{}
}

type mintRequest struct {
	claims token.Claims
	reply  chan<- mintResult
}

type mintResult struct {
	token string
	err   error
}

// errStopping: the notifier is shutting down and mints nothing more.
var errStopping = errors.New("notifier stopping: no token minted")

// newMinter returns a minter that serves until ctx ends; start its
// goroutines with Run (the same ctx). Sign, which takes no context, stops
// waiting for them when ctx ends.
func newMinter(ctx context.Context, keys *token.Keyring) *minter {
	return &minter{keys: keys, reqs: make(chan mintRequest), done: ctx.Done()}
}

// Run signs on one goroutine per CPU until ctx ends.
func (m *minter) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case r := <-m.reqs:
					tok, err := m.keys.Sign(r.claims)
					r.reply <- mintResult{tok, err}
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// Sign returns the token for c, signed on one of the minter's goroutines.
func (m *minter) Sign(c token.Claims) (string, error) {
	reply := make(chan mintResult, 1)
	select {
	case m.reqs <- mintRequest{c, reply}:
	case <-m.done:
		return "", errStopping
	}
	r := <-reply
	return r.token, r.err
}
