package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// DefaultGrace is how long a registration may be missing, or published
// slices may be missing from the API server, before /healthz fails: long
// enough for a kubelet restart or an API server hiccup, short enough that a
// stuck daemon is restarted.
const DefaultGrace = time.Minute

// probes is the state /healthz judges by.
type probes struct {
	mu    sync.Mutex
	grace time.Duration
	now   func() time.Time
	since map[string]time.Time // per resource: not registered since (as first seen)
}

// SetGrace sets how long a condition may be bad before /healthz fails
// (DefaultGrace; 0 fails at once).
func (m *Metrics) SetGrace(d time.Duration) {
	m.probes.mu.Lock()
	defer m.probes.mu.Unlock()
	m.probes.grace = d
}

// stuck tells whether a condition (key) is bad for longer than the grace,
// and how long it is bad; a condition that is fine again forgets its start.
func (p *probes) stuck(key string, bad bool) (bool, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !bad {
		delete(p.since, key)
		return false, 0
	}
	now := p.now()
	start, ok := p.since[key]
	if !ok {
		start = now
		p.since[key] = start
	}
	return now.Sub(start) >= p.grace, now.Sub(start)
}

// overdue tells whether a condition bad since start (zero: fine) is bad for
// longer than the grace.
func (p *probes) overdue(start time.Time) (bool, time.Duration) {
	if start.IsZero() {
		return false, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	took := p.now().Sub(start)
	return took >= p.grace, took
}

// live is /healthz: every resource of device-plugin mode is registered with
// the kubelet, or was unregistered for less than the grace; in DRA mode see
// DRA.live.
func (m *Metrics) live() error {
	var errs []error
	for _, s := range m.snapshot() {
		if bad, took := m.probes.stuck("registered/"+s.ResourceName(), !s.Registered()); bad {
			errs = append(errs, fmt.Errorf("%s: not registered with the kubelet for %s", s.ResourceName(), took.Round(time.Second)))
		}
	}
	if d := m.draMode(); d != nil {
		errs = append(errs, d.live()...)
	}
	return errors.Join(errs...)
}

// ready is /readyz: something is served, every resource is registered with
// the kubelet that runs now, and in DRA mode the slices were published.
func (m *Metrics) ready() error {
	sources := m.snapshot()
	d := m.draMode()
	if len(sources) == 0 && d == nil {
		return errors.New("no resource is served yet")
	}
	for _, s := range sources {
		if !s.Registered() {
			return fmt.Errorf("%s: not registered with the kubelet", s.ResourceName())
		}
	}
	if d != nil {
		return d.ready()
	}
	return nil
}

func (m *Metrics) draMode() *DRA {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dra
}

// answer writes a probe's result: "ok", or 503 and why not, one line each.
func answer(w http.ResponseWriter, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}
