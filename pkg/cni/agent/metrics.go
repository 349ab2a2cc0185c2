package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The outcomes of a request, devplumb_agent_requests_total's "outcome": the
// call's own CNI error is its answer; an agent error sends the entry point
// to devplumb-direct.
const (
	outcomeOK       = "ok"
	outcomeCNIError = "cni-error"
	outcomeFallback = "agent-error"
)

// metrics are the agent's own: what it was asked and how it answered, and
// what it holds. The calls' phase timings are phasemetrics' (Config.Phases).
type metrics struct {
	requests *prometheus.CounterVec
	pending  prometheus.GaugeFunc
	later    prometheus.GaugeFunc
}

func newMetrics(t *pendingTable, l *laterWrites) *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "devplumb_agent_requests_total",
			Help: "Requests of the CNI entry point to the node agent, by request (prepare, commit, rollback), " +
				"command (ADD, DEL, CHECK) and outcome (ok, cni-error, agent-error: the entry point ran devplumb-direct).",
		}, []string{"request", "command", "outcome"}),
		pending: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "devplumb_agent_pending_calls",
			Help: "Prepared calls waiting for their commit or rollback.",
		}, func() float64 { return float64(t.len()) }),
		later: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "devplumb_agent_pending_removals",
			Help: "DELs' network-status removals not yet written to the API server.",
		}, func() float64 { return float64(l.len()) }),
	}
}

// Collectors are the agent's metrics, for the registry that serves them.
func (a *Agent) Collectors() []prometheus.Collector {
	return []prometheus.Collector{a.metrics.requests, a.metrics.pending, a.metrics.later}
}

// count notes one request's outcome: err is an agent error, cniErr the
// call's own error in the answer.
func (m *metrics) count(request, command string, cniErr bool, err error) {
	outcome := outcomeOK
	switch {
	case err != nil:
		outcome = outcomeFallback
	case cniErr:
		outcome = outcomeCNIError
	}
	m.requests.WithLabelValues(request, command, outcome).Inc()
}
