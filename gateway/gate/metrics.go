package gate

import "github.com/prometheus/client_golang/prometheus"

// The outcomes of the gate's decisions (usher_gate_decisions_total).
const (
	outPass           = "pass"        // a good pass: 200
	outBypass         = "bypass"      // a bypass rule: 200
	outUnprotected    = "unprotected" // no rule protects the request: 200
	outComplete       = "complete"    // completePath with a pass: 200, the slot freed
	outCompleteFailed = "complete-failed"
	outFailOpen       = "fail-open"   // the line unreadable, failMode open: 200
	outFailClosed     = "fail-closed" // the line unreadable, failMode closed: 503
	outRedirect       = "redirect"    // a navigation without a pass: 302
	outDenied         = "denied"      // a navigation without a pass, as a 401 for nginx
	outQueued         = "queued"      // anything else without a pass: 429
	outClosed         = "closed"      // anything else, the queue closed or paused: 503
	outBadPass        = "bad-pass"    // a cookie that is no good pass here (forged, expired, another user's)
	outInvalid        = "invalid"     // the proxy's headers describe no request: 400
	outIssued         = "issued"      // a pass handed out (/v1/gate/pass)
	outSwept          = "swept"       // an idle pass's slot freed
)

// Metrics are the gate's.
type Metrics struct {
	decisions *prometheus.CounterVec
}

// NewMetrics registers the gate's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "usher_gate_decisions_total",
		Help: "The proxy gate's decisions and passes, by queue (empty: no rule) and outcome.",
	}, []string{"queue", "outcome"})}
	reg.MustRegister(m.decisions)
	return m
}

// Forget drops every series of queue q, once it is deleted.
func (m *Metrics) Forget(q string) {
	m.decisions.DeletePartialMatch(prometheus.Labels{"queue": q})
}

func (m *Metrics) count(q, outcome string) {
	if m != nil {
		m.decisions.WithLabelValues(q, outcome).Inc()
	}
}
