package bus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Start-up retries (see Retry).
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
)

// permanentError is an error no retry will cure.
type permanentError struct{ err error }

func (p permanentError) Error() string { return p.err.Error() }
func (p permanentError) Unwrap() error { return p.err }

// Permanent marks err as one that waiting will not cure: Retry returns it
// at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// Retry calls f until it succeeds, returns a Permanent error, or ctx ends,
// waiting between attempts from 100 ms, doubling up to 5 s, each wait
// jittered (half to all of it) so that services started together do not
// retry in step. Every failed attempt is logged with what it was doing (at
// most one line per 2.5 s once the waits are long), so a service waiting
// for a broker that is still electing its leaders says so instead of
// exiting. A start-up step that fails on a fresh cluster — no server up
// yet, no JetStream meta leader, an R3 stream without three current peers
// — is worth retrying; credentials or permissions the broker refuses are
// not.
func Retry(ctx context.Context, log *slog.Logger, what string, f func(ctx context.Context) error) error {
	wait := retryFirst
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		if err == nil {
			if attempt > 1 && log != nil {
				log.Info(what+": done", "attempts", attempt, "after", time.Since(start).Round(time.Millisecond).String())
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (gave up: %w)", what, err, ctx.Err())
		}
		var p permanentError
		if errors.As(err, &p) || permanent(err) {
			return err
		}
		d := wait/2 + rand.N(wait/2+1)
		if log != nil {
			log.Warn(what+": retrying", "err", err, "attempt", attempt, "in", d.Round(time.Millisecond).String())
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (gave up: %w)", what, err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// permanent reports whether err is the broker refusing who the process is
// or what it asked (authentication, authorization, either side of TLS
// refusing the other): retrying cannot change its answer.
func permanent(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrNkeysNotSupported),
		errors.Is(err, nats.ErrPermissionViolation), errors.Is(err, nats.ErrAccountAuthExpired),
		errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted),
		errors.As(err, &cv), errors.As(err, &ua), errors.As(err, &he), errors.As(err, &ci):
		return true
	}
	return strings.Contains(err.Error(), "remote error: tls:")
}
