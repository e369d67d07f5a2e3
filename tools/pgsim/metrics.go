package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
)

// This file writes the Prometheus text exposition format (version 0.0.4)
// by hand. pgsim would use github.com/prometheus/client_golang with its own
// prometheus.NewRegistry and promhttp.HandlerFor, but the module's go.sum
// lacks entries for client_golang's dependencies (client_model, common,
// procfs, protobuf), so it cannot be compiled without editing go.mod/go.sum.
// The metric names, types and labels here are what the client_golang
// version would expose, and every metrics value lives in a Metrics instance
// (no global default registry).

const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// outcome is the fixed set of label values of usher_pgsim_requests_total.
type outcome int

const (
	outcomeCaptured outcome = iota
	outcomeReplayed
	outcomeFailed
	outcomeOutage
	outcomeTimeout
	outcomeConflict
	outcomeBadRequest
	outcomeUnanswered // captured in capture-hang mode; the answer never went out
	outcomeDeclined   // declined in decline mode; nothing captured
	numOutcomes
)

func (o outcome) String() string {
	switch o {
	case outcomeCaptured:
		return "captured"
	case outcomeReplayed:
		return "replayed"
	case outcomeFailed:
		return "failed"
	case outcomeOutage:
		return "outage"
	case outcomeTimeout:
		return "timeout"
	case outcomeConflict:
		return "conflict"
	case outcomeBadRequest:
		return "bad_request"
	case outcomeUnanswered:
		return "unanswered"
	case outcomeDeclined:
		return "declined"
	default:
		return "unknown"
	}
}

// ledgerOp and ledgerOutcome are the labels of
// usher_pgsim_ledger_requests_total: lookups and voids by outcome.
type (
	ledgerOp      int
	ledgerOutcome int
)

const (
	opLookup ledgerOp = iota
	opVoid
	numLedgerOps
)

const (
	ledgerOK ledgerOutcome = iota
	ledgerNotFound
	ledgerOutage
	ledgerCanceled
	ledgerBadRequest
	numLedgerOutcomes
)

func (o ledgerOp) String() string {
	if o == opVoid {
		return "void"
	}
	return "lookup"
}

func (o ledgerOutcome) String() string {
	switch o {
	case ledgerOK:
		return "ok"
	case ledgerNotFound:
		return "not_found"
	case ledgerOutage:
		return "outage"
	case ledgerCanceled:
		return "canceled"
	case ledgerBadRequest:
		return "bad_request"
	default:
		return "unknown"
	}
}

// Metrics holds pgsim's Prometheus metrics. It is safe for concurrent use.
type Metrics struct {
	mu       sync.Mutex
	ledger   [numLedgerOps][numLedgerOutcomes]uint64
	requests [numOutcomes]uint64
	bounds   []float64 // histogram upper bounds, seconds, ascending
	buckets  []uint64  // non-cumulative counts; len(bounds)+1 (last is +Inf)
	sum      float64
	count    uint64
}

// NewMetrics returns an empty metrics registry.
func NewMetrics() *Metrics {
	bounds := []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30}
	return &Metrics{bounds: bounds, buckets: make([]uint64, len(bounds)+1)}
}

// observe records one payment request's outcome and duration in seconds.
func (m *Metrics) observe(o outcome, seconds float64) {
	if o < 0 || o >= numOutcomes {
		return
	}
	if seconds < 0 || math.IsNaN(seconds) {
		seconds = 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[o]++
	i := 0
	for i < len(m.bounds) && seconds > m.bounds[i] {
		i++
	}
	m.buckets[i]++
	m.sum += seconds
	m.count++
}

// observeLedger records one lookup or void by its outcome.
func (m *Metrics) observeLedger(op ledgerOp, o ledgerOutcome) {
	if op < 0 || op >= numLedgerOps || o < 0 || o >= numLedgerOutcomes {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ledger[op][o]++
}

// ledgerFor returns the count of one lookup or void outcome.
func (m *Metrics) ledgerFor(op ledgerOp, o ledgerOutcome) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ledger[op][o]
}

// requestsFor returns the request count for one outcome.
func (m *Metrics) requestsFor(o outcome) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests[o]
}

// gaugeSnapshot is state read from the gateway at scrape time.
type gaugeSnapshot struct {
	mode     Mode
	inFlight int
	charges  int
	voided   int
}

// write writes every metric in the text exposition format.
func (m *Metrics) write(w io.Writer, g gaugeSnapshot) error {
	m.mu.Lock()
	requests, ledger := m.requests, m.ledger
	buckets := append([]uint64(nil), m.buckets...)
	sum, count := m.sum, m.count
	m.mu.Unlock()

	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }

	p("# HELP usher_pgsim_requests_total Payment requests by outcome.\n")
	p("# TYPE usher_pgsim_requests_total counter\n")
	for o := outcome(0); o < numOutcomes; o++ {
		p("usher_pgsim_requests_total{outcome=%q} %d\n", o.String(), requests[o])
	}

	p("# HELP usher_pgsim_ledger_requests_total Payment lookups and voids by outcome.\n")
	p("# TYPE usher_pgsim_ledger_requests_total counter\n")
	for op := ledgerOp(0); op < numLedgerOps; op++ {
		for o := ledgerOutcome(0); o < numLedgerOutcomes; o++ {
			p("usher_pgsim_ledger_requests_total{op=%q,outcome=%q} %d\n", op.String(), o.String(), ledger[op][o])
		}
	}

	p("# HELP usher_pgsim_request_duration_seconds Time to answer a payment request, including simulated latency.\n")
	p("# TYPE usher_pgsim_request_duration_seconds histogram\n")
	var cum uint64
	for i, b := range m.bounds {
		cum += buckets[i]
		p("usher_pgsim_request_duration_seconds_bucket{le=%q} %d\n", formatFloat(b), cum)
	}
	cum += buckets[len(m.bounds)]
	p("usher_pgsim_request_duration_seconds_bucket{le=\"+Inf\"} %d\n", cum)
	p("usher_pgsim_request_duration_seconds_sum %s\n", formatFloat(sum))
	p("usher_pgsim_request_duration_seconds_count %d\n", count)

	p("# HELP usher_pgsim_in_flight_payments Payment requests currently being processed.\n")
	p("# TYPE usher_pgsim_in_flight_payments gauge\n")
	p("usher_pgsim_in_flight_payments %d\n", g.inFlight)

	p("# HELP usher_pgsim_captured_charges Charges currently recorded (cleared by reset).\n")
	p("# TYPE usher_pgsim_captured_charges gauge\n")
	p("usher_pgsim_captured_charges %d\n", g.charges)

	p("# HELP usher_pgsim_voided_charges Captured charges since voided (cleared by reset).\n")
	p("# TYPE usher_pgsim_voided_charges gauge\n")
	p("usher_pgsim_voided_charges %d\n", g.voided)

	p("# HELP usher_pgsim_mode Current gateway mode (1 for the active one).\n")
	p("# TYPE usher_pgsim_mode gauge\n")
	for _, mode := range Modes() {
		v := 0
		if mode == g.mode {
			v = 1
		}
		p("usher_pgsim_mode{mode=%q} %d\n", string(mode), v)
	}
	return bw.Flush()
}

func formatFloat(f float64) string {
	return strconv.FormatFloat(f, 'g', -1, 64)
}
