package testenv

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSFromConfig starts an embedded JetStream server configured by the
// nats-server configuration file at path — its authorization, TLS and
// limits, exactly as a deployment would load them — but listening on a
// random loopback port, without its monitoring port, and storing in a
// temporary folder. log, when not nil, receives what the server logs
// (permission violations among it). The server stops when the test ends.
func NATSFromConfig(t testing.TB, path string, log *NATSLog) *server.Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats config %s: %v", path, err)
	}
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.NoSigs, opts.NoLog = true, log == nil
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	if log != nil {
		s.SetLogger(log, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server: not ready after 10s")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// NATSLog keeps what an embedded server logs, for a test to inspect. It
// is safe for concurrent use.
type NATSLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *NATSLog) add(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+" "+fmt.Sprintf(format, v...))
}

// Noticef implements server.Logger.
func (l *NATSLog) Noticef(format string, v ...any) { l.add("[INF]", format, v...) }

// Warnf implements server.Logger.
func (l *NATSLog) Warnf(format string, v ...any) { l.add("[WRN]", format, v...) }

// Fatalf implements server.Logger.
func (l *NATSLog) Fatalf(format string, v ...any) { l.add("[FTL]", format, v...) }

// Errorf implements server.Logger.
func (l *NATSLog) Errorf(format string, v ...any) { l.add("[ERR]", format, v...) }

// Debugf implements server.Logger.
func (l *NATSLog) Debugf(format string, v ...any) {}

// Tracef implements server.Logger.
func (l *NATSLog) Tracef(format string, v ...any) {}

// Violations returns every permission or authorization violation logged
// so far: publishes and subscriptions the server refused, and connections
// it did not let in.
func (l *NATSLog) Violations() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, "Violation") {
			out = append(out, line)
		}
	}
	return out
}
