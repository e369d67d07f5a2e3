// Package config reads service settings from environment variables.
//
// A service describes each setting once (name, default, parser); an Env
// collects every problem instead of stopping at the first, so a operator fixing
// a deployment sees all the mistakes in one start-up error. Env also records
// which names it was asked for, which lets a test check that compose.yaml sets
// only variables a service reads.
package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Env reads settings through an injected getenv.
type Env struct {
	getenv func(string) string
	errs   []error
	names  []string
}

// New returns an Env reading through getenv (os.Getenv in main, a map in tests).
func New(getenv func(string) string) *Env { return &Env{getenv: getenv} }

func (e *Env) lookup(name string) string {
	e.names = append(e.names, name)
	return strings.TrimSpace(e.getenv(name))
}

// String returns the variable or def when unset.
func (e *Env) String(name, def string) string {
	if v := e.lookup(name); v != "" {
		return v
	}
	return def
}

// List returns a comma-separated variable as a list, or def when unset.
func (e *Env) List(name, def string) []string {
	var out []string
	for _, s := range strings.Split(e.String(name, def), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Int returns the variable as an integer no smaller than min, or def when unset.
func (e *Env) Int(name string, def, min int) int {
	v := e.lookup(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want an integer >= %d", name, v, min))
		return def
	}
	return n
}

// Duration returns the variable as a Go duration (e.g. 100ms), or def when unset.
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	v := e.lookup(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want a positive duration such as 250ms", name, v))
		return def
	}
	return d
}

// Addr returns the variable as a listen address, host:port (an empty host
// is every interface, port 0 any free port), or def when unset. Anything
// else is a problem now rather than a failed listen after the service has
// connected everything else ("127.0.0.1" without its port).
func (e *Env) Addr(name, def string) string {
	v := e.String(name, def)
	if v == "" {
		return v
	}
	_, port, err := net.SplitHostPort(v)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("%s=%q: want host:port, such as 127.0.0.1:8080", name, v))
		return def
	}
	return v
}

// Check records err as a configuration problem when it is not nil.
func (e *Env) Check(err error) {
	if err != nil {
		e.errs = append(e.errs, err)
	}
}

// Err reports every problem found so far, or nil.
func (e *Env) Err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return fmt.Errorf("configuration: %w", errors.Join(e.errs...))
}

// Names lists every variable the Env was asked for, in order.
func (e *Env) Names() []string { return e.names }

// LoadOrCreateFile returns the contents of path. When the file does not exist
// it is created with gen's output, readable by the owner only. Services
// started side by side may race here: the contents are written to a
// temporary file first and then linked into place, which fails if another
// process got there first — so nobody ever reads a half-written file, and
// every process ends up with the same contents.
func LoadOrCreateFile(path string, gen func() ([]byte, error)) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil {
		return b, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	b, err := gen()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return os.ReadFile(path)
	} else if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return b, nil
}

// Logger returns the JSON logger every service writes to stdout, at level
// (debug, info, warn or error).
func Logger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("USHER_LOG_LEVEL=%q: %w", level, err)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// LocalClock returns the host's clock as the fault knobs shift it (see
// LocalClockFrom).
func (e *Env) LocalClock() func() time.Time { return e.LocalClockFrom(time.Now) }

// LocalClockFrom returns now shifted by USHER_FAULT_CLOCK_OFFSET (a Go
// duration, possibly negative; unset: none) and, from a moment after this
// call on, by USHER_FAULT_CLOCK_STEP more: "-2m@20s" steps the clock back
// two minutes 20 s after the process read its settings, as an NTP step
// does to a host's wall clock. The fault suite sets them to put one
// service's clock minutes off, or to jump it while it runs; no decision
// depends on the local clock (every service follows Redis's, see package
// clock), so nothing else should. A time.Time carries its monotonic
// reading with its wall time and Add moves both: an interval measured
// across the step is off by the step too, which a real NTP step spares
// Go programs.
func (e *Env) LocalClockFrom(now func() time.Time) func() time.Time {
	offset := e.clockOffset()
	step, after := e.clockStep()
	if offset == 0 && step == 0 {
		return now
	}
	start := now()
	return func() time.Time {
		t := now()
		if t.Sub(start) >= after {
			return t.Add(offset + step)
		}
		return t.Add(offset)
	}
}

func (e *Env) clockOffset() time.Duration {
	v := e.lookup("USHER_FAULT_CLOCK_OFFSET")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("USHER_FAULT_CLOCK_OFFSET=%q: want a duration such as -2m", v))
		return 0
	}
	return d
}

// clockStep reads USHER_FAULT_CLOCK_STEP: step@after, both Go durations,
// after not negative.
func (e *Env) clockStep() (step, after time.Duration) {
	v := e.lookup("USHER_FAULT_CLOCK_STEP")
	if v == "" {
		return 0, 0
	}
	s, a, ok := strings.Cut(v, "@")
	var err error
	if ok {
		if step, err = time.ParseDuration(s); err == nil {
			after, err = time.ParseDuration(a)
		}
	}
	if !ok || err != nil || after < 0 {
		e.errs = append(e.errs, fmt.Errorf("USHER_FAULT_CLOCK_STEP=%q: want a step and when it comes after the start, such as -2m@20s", v))
		return 0, 0
	}
	return step, after
}
