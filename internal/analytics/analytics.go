// Package analytics defines the Prometheus metrics of a shopper's journey
// through a queue, which several services export: how long shoppers wait
// in line, how long an admitted shopper takes to order, how long an order
// takes to become final, and what admitted shoppers did with their slot.
//
// Each moment is measured in the one service that knows both of its ends,
// and counted there once:
//
//	usher_time_in_line_seconds{queue}            admitter: join → READY, by the admitter whose publish stored the admission
//	usher_ready_to_order_seconds{queue}          orderworker: READY → order request, when the order is final
//	usher_order_to_final_seconds{queue,status}   orderworker: order request → final status
//	usher_admitted_outcomes_total{queue,outcome} ordered (orderworker, when the order is final),
//	                                             expired (admitter, the tick that expired the token),
//	                                             left (gateway, the leave that freed the slot)
//
// The outcome counter has the same name, help and labels in every service
// that exports it, so sum by (queue, outcome) adds the services up, and the
// share of admitted shoppers who ordered is
//
//	sum by (queue) (rate(usher_admitted_outcomes_total{outcome="ordered"}[5m]))
//	  / sum by (queue) (rate(usher_admitted_outcomes_total[5m]))
//
// Labels are the queue (named by ops), the order's final status and the
// outcome: never a user, ticket, token or order id.
package analytics

import "github.com/prometheus/client_golang/prometheus"

// The metrics' names.
const (
	TimeInLine   = "usher_time_in_line_seconds"
	ReadyToOrder = "usher_ready_to_order_seconds"
	OrderToFinal = "usher_order_to_final_seconds"
	Outcomes     = "usher_admitted_outcomes_total"
)

// What an admitted shopper did with their slot (the outcome label).
const (
	Ordered = "ordered" // placed an order with the token (whatever became of the order)
	Expired = "expired" // let the token expire unused
	Left    = "left"    // gave the slot up before ordering
)

// Buckets span a tenth of a second to an hour: a line that moves at once,
// the seconds of a busy drop, the minutes of a big one, a token's TTL (five
// minutes by default) and an order's payment deadline and lookup grace.
var Buckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 2700, 3600}

// NewTimeInLine is the histogram of join → READY per queue.
func NewTimeInLine() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    TimeInLine,
		Help:    "From a shopper's join (for a scheduled drop's pre-queue, the opening) to their READY (the token's readyAt).",
		Buckets: Buckets,
	}, []string{"queue"})
}

// NewReadyToOrder is the histogram of READY → order request per queue.
func NewReadyToOrder() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    ReadyToOrder,
		Help:    "From an admitted shopper's READY (the token's readyAt) to their order request.",
		Buckets: Buckets,
	}, []string{"queue"})
}

// NewOrderToFinal is the histogram of order request → final status per
// queue and final status (PAID, FAILED, REJECTED).
func NewOrderToFinal() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    OrderToFinal,
		Help:    "From an order's request to its final status, by that status.",
		Buckets: Buckets,
	}, []string{"queue", "status"})
}

// NewOutcomes is the counter of what admitted shoppers did, per queue and
// outcome (ordered, expired, left).
func NewOutcomes() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: Outcomes,
		Help: "Admitted shoppers by what they did with their slot: ordered, let the token expire, or left.",
	}, []string{"queue", "outcome"})
}
