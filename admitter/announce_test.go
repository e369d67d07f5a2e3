package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A publish refused because the same message id is being stored right
// now (another admitter's publish of the same admission, on a replicated
// stream) is no failure of the announcement: it is left to whoever stores
// it.
func TestADuplicateStillBeingStoredIsNoError(t *testing.T) {
	inProcess := &jetstream.APIError{Code: 409, ErrorCode: 10158, Description: "duplicate message id is in process"}
	if !storing(inProcess) || !storing(fmt.Errorf("publish: %w", inProcess)) {
		t.Error("409 duplicate message id is in process: not recognised")
	}
	for _, err := range []error{
		&jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"},
		jetstream.ErrNoStreamResponse, errors.New("timeout"),
	} {
		if storing(err) {
			t.Errorf("%v taken for a duplicate in process", err)
		}
	}
}
