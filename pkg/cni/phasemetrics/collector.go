// Package phasemetrics is the node daemon side of devplumb's phase timings
// (`devplumbctl metrics`): it drains the spool the CNI calls fill (package
// phasespool) into Prometheus histograms.
package phasemetrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
)

// buckets span a fast local step (100 µs) to a slow delegate or API server (~13 s).
var buckets = prometheus.ExponentialBuckets(0.0001, 2, 18)

// The paths a call took, the value of devplumb_call_duration_seconds's "path":
// through the node agent (its calls are observed in its process), or whole in
// devplumb-direct (its calls leave spool records).
const (
	PathAgent  = "agent"
	PathDirect = "direct"
)

// Collector drains one spool into histograms: per op and phase, and per op and
// outcome for the sum of a call's phases (devplumb's own time, without process start).
// The node agent also observes its own calls into them (Observe).
type Collector struct {
	dir   string
	log   *slog.Logger
	phase *prometheus.HistogramVec
	call  *prometheus.HistogramVec
	bad   prometheus.Counter

	mu sync.Mutex // one drain at a time: a record is observed once
}

// NewHistograms returns the histograms without a spool: the node agent's,
// observing its own calls (Observe).
func NewHistograms(log *slog.Logger) *Collector { return newCollector(log) }

// NewCollector makes the spool below stateDir (mode 0700, checked like all of the
// state directory) and the collectors that drain it. Close removes the spool.
func NewCollector(stateDir string, log *slog.Logger) (*Collector, error) {
	dir, err := safefile.EnsureDirUnder(stateDir, phasespool.SpoolDir, 0o700)
	if err != nil {
		return nil, fmt.Errorf("phase spool: %w", err)
	}
	c := newCollector(log)
	c.dir = dir
	return c, nil
}

func newCollector(log *slog.Logger) *Collector {
	return &Collector{
		log: log,
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "devplumb_phase_duration_seconds",
			Help:    "Time devplumb's CNI calls spent in each phase (podResources, claim, deviceInfo, delegate, networkStatus, kube, ...).",
			Buckets: buckets,
		}, []string{"op", "phase", "network", "path"}),
		call: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "devplumb_call_duration_seconds",
			Help:    "Time devplumb's CNI calls spent in all their phases, by outcome (ok, error) and path (agent, direct).",
			Buckets: buckets,
		}, []string{"op", "result", "network", "path"}),
		bad: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "devplumb_phase_spool_unreadable_total",
			Help: "Spool records that could not be read and were removed.",
		}),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.phase.Describe(ch)
	c.call.Describe(ch)
	if c.dir != "" { // the agent's histograms have no spool to count
		c.bad.Describe(ch)
	}
}

// Collect drains the spool first, so a scrape sees every call made before it.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if err := c.Drain(); err != nil {
		c.log.Warn("drain phase spool", "err", err)
	}
	c.phase.Collect(ch)
	c.call.Collect(ch)
	if c.dir != "" {
		c.bad.Collect(ch)
	}
}

// Drain observes and removes every complete record in the spool.
func (c *Collector) Drain() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir == "" {
		return nil // the agent's: no spool
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("phase spool: %w", err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // a record being written
		}
		path := filepath.Join(c.dir, e.Name())
		if err := c.observe(path); err != nil {
			c.bad.Inc()
			c.log.Warn("removing unreadable phase record", "file", path, "err", err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("phase spool: %w", err)
		}
	}
	return nil
}

func (c *Collector) observe(path string) error {
	b, err := safefile.ReadFile(path, phasespool.MaxRecord, safefile.NoFollow)
	if err != nil {
		return err
	}
	var r phasespool.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	return c.Observe(r, PathDirect)
}

// Observe adds one call's phases to the histograms; callPath is PathAgent or
// PathDirect.
func (c *Collector) Observe(r phasespool.Record, callPath string) error {
	if r.Op != "ADD" && r.Op != "DEL" {
		return fmt.Errorf("op %q is neither ADD nor DEL", r.Op)
	}
	var total float64
	for _, p := range r.Phases {
		s := p.Duration.Seconds()
		total += s
		c.phase.WithLabelValues(r.Op, p.Name, r.Network, callPath).Observe(s)
	}
	result := "ok"
	if r.Failed {
		result = "error"
	}
	c.call.WithLabelValues(r.Op, result, r.Network, callPath).Observe(total)
	return nil
}

// Close removes the spool, so devplumb stops writing records no one will read.
func (c *Collector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir == "" {
		return nil
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("phase spool: %w", err)
	}
	return nil
}
