package nodecache

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the node caches' (one per kubeconfig the node's configs
// name): how often a lookup was answered from memory, and what they hold.
type Metrics struct {
	lookups *prometheus.CounterVec
	reads   *prometheus.CounterVec
	objects *prometheus.Desc

	mu     sync.Mutex
	caches map[*Cache]bool
}

// NewMetrics returns the metrics of the caches New is given them for.
func NewMetrics() *Metrics {
	return &Metrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "devplumb_agent_cache_lookups_total",
			Help: "Reads of an ADD or DEL through the node agent, by kind and result: hit (answered from the agent's " +
				"watches) or miss (read from the API server).",
		}, []string{"kind", "result"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "devplumb_agent_claim_reads_total",
			Help: "ResourceClaims the node agent read when a pod naming them reached the node, by result (ok, error).",
		}, []string{"result"}),
		objects: prometheus.NewDesc("devplumb_agent_cached_objects",
			"Objects the node agent's watches hold, by kind: this node's pods and ResourceSlices, their claims, NADs.",
			[]string{"kind"}, nil),
		caches: map[*Cache]bool{},
	}
}

func (m *Metrics) add(c *Cache) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.caches[c] = true
}

func (m *Metrics) remove(c *Cache) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.caches, c)
}

func (m *Metrics) lookup(kind string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.lookups.WithLabelValues(kind, result).Inc()
}

func (m *Metrics) claimRead(ok bool) {
	result := "error"
	if ok {
		result = "ok"
	}
	m.reads.WithLabelValues(result).Inc()
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.lookups.Describe(ch)
	m.reads.Describe(ch)
	ch <- m.objects
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.lookups.Collect(ch)
	m.reads.Collect(ch)
	for kind, n := range m.Held() {
		ch <- prometheus.MustNewConstMetric(m.objects, prometheus.GaugeValue, float64(n), kind)
	}
}

// Held counts the objects the caches hold, by kind ("pod", "resourceslice",
// "resourceclaim", "networkattachmentdefinition").
func (m *Metrics) Held() map[string]int {
	held := map[string]int{kindPod: 0, kindSlice: 0, kindClaim: 0, kindNAD: 0}
	m.mu.Lock()
	defer m.mu.Unlock()
	for c := range m.caches {
		for kind, n := range c.held() {
			held[kind] += n
		}
	}
	return held
}

// held counts the objects c holds, by kind.
func (c *Cache) held() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{kindPod: len(c.pods.GetStore().ListKeys())}
	if c.slices != nil {
		out[kindSlice] = len(c.slices.GetStore().ListKeys())
	}
	if c.nads != nil {
		out[kindNAD] = len(c.nads.GetStore().ListKeys())
	}
	c.claims.mu.Lock()
	out[kindClaim] = len(c.claims.claims)
	c.claims.mu.Unlock()
	return out
}
