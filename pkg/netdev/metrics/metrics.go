// Package metrics exposes netdev-dp's state to Prometheus and its health to
// the kubelet's probes, in both modes: devices per resource and health,
// registrations, kubelet restarts seen, allocations and errors (device-plugin
// mode), slices published, claims prepared and unprepared with their latency
// (DRA mode, dra.go), on /metrics, /healthz and /readyz (probes.go).
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
)

// Source is one served resource; *deviceplugin.Server is one.
type Source interface {
	ResourceName() string
	Devices() []deviceplugin.Device
	Registered() bool
}

// Metrics collects for every resource Add was given. It is a
// deviceplugin.Observer.
type Metrics struct {
	prefix  string
	reg     *prometheus.Registry
	events  *prometheus.CounterVec
	errors  *prometheus.CounterVec
	devices *prometheus.Desc

	mu      sync.Mutex
	sources []Source
	dra     *DRA // DRA mode only
	probes  probes
}

// New makes the collectors, registered in a registry of their own (with the
// process and Go runtime collectors), so tests and daemons never share state.
func New(prefix string) *Metrics {
	m := &Metrics{
		prefix: prefix,
		probes: probes{grace: DefaultGrace, now: time.Now, since: map[string]time.Time{}},
		reg:    prometheus.NewRegistry(),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_plugin_events_total",
			Help: "Kubelet plugin events per resource (DRA mode: per driver): registered, register_failed, kubelet_restart, allocated (one per container), allocate_failed.",
		}, []string{"resource", "event"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "_errors_total",
			Help: "Errors per resource (DRA mode: per driver) and operation (register, allocate, sync, watch, publish, prepare, unprepare).",
		}, []string{"resource", "op"}),
		devices: prometheus.NewDesc(prefix+"_devices",
			"Devices per resource and health: advertised to the kubelet (device-plugin mode), as the last scan found them (DRA mode).", []string{"resource", "health"}, nil),
	}
	m.reg.MustRegister(m.events, m.errors, m, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Add makes a resource's devices and readiness visible.
func (m *Metrics) Add(s Source) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = append(m.sources, s)
	// Counters start at 0, so a rate() over a fresh daemon is defined.
	for _, ev := range []deviceplugin.Event{deviceplugin.EventRegistered, deviceplugin.EventRegisterFailed,
		deviceplugin.EventKubeletRestart, deviceplugin.EventAllocated, deviceplugin.EventAllocateFailed} {
		m.events.WithLabelValues(s.ResourceName(), string(ev))
	}
}

// Observe counts a plugin event; failures also count as errors.
func (m *Metrics) Observe(resource string, ev deviceplugin.Event) {
	m.events.WithLabelValues(resource, string(ev)).Inc()
	switch ev {
	case deviceplugin.EventRegisterFailed:
		m.Error(resource, "register")
	case deviceplugin.EventAllocateFailed:
		m.Error(resource, "allocate")
	}
}

// Error counts an error of the daemon's own (a failed sync, a broken watch).
// A nil Metrics counts nothing, so callers need no check.
func (m *Metrics) Error(resource, op string) {
	if m == nil {
		return
	}
	m.errors.WithLabelValues(resource, op).Inc()
}

// Describe and Collect read the device gauges at scrape time, from the
// plugins' own lists: no second copy to keep in step.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.devices }

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.snapshot() {
		healthy, unhealthy := 0, 0
		for _, d := range s.Devices() {
			if d.Healthy {
				healthy++
			} else {
				unhealthy++
			}
		}
		m.collectDevices(ch, s.ResourceName(), healthy, unhealthy)
	}
	m.mu.Lock()
	dra := m.dra
	m.mu.Unlock()
	if dra != nil {
		for res, n := range dra.devices() {
			m.collectDevices(ch, res, n[0], n[1])
		}
	}
}

func (m *Metrics) collectDevices(ch chan<- prometheus.Metric, resource string, healthy, unhealthy int) {
	ch <- prometheus.MustNewConstMetric(m.devices, prometheus.GaugeValue, float64(healthy), resource, "healthy")
	ch <- prometheus.MustNewConstMetric(m.devices, prometheus.GaugeValue, float64(unhealthy), resource, "unhealthy")
}

func (m *Metrics) snapshot() []Source {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Source(nil), m.sources...)
}

// Handler serves /metrics, /healthz and /readyz (see probes.go).
func (m *Metrics) Handler() http.Handler { return m.HandlerWith(m.MetricsHandler()) }

// MetricsHandler serves the registry's metrics.
func (m *Metrics) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// HandlerWith is Handler serving metrics at /metrics (MetricsHandler behind metricsauth's
// guard, for --secure-metrics); the probes stay open: the kubelet calls them without a token.
func (m *Metrics) HandlerWith(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { answer(w, m.live()) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { answer(w, m.ready()) })
	return mux
}
