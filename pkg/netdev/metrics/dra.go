package metrics

import (
	"fmt"
	"maps"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
)

// DRA is what DRA mode reports (it implements dramode.Observer): the
// driver's registration with the kubelet, its slices and its claims.
type DRA struct {
	m                 *Metrics
	driver, regSocket string
	slices            prometheus.Gauge
	inSync            prometheus.Gauge
	publishes         prometheus.Counter
	claims            *prometheus.CounterVec
	latency           *prometheus.HistogramVec
	mu                sync.Mutex
	scanned           map[string][2]int // per resource: healthy, unhealthy
	start             time.Time         // of the daemon, or of the last registration change
	registered, asked bool              // the kubelet's last word; a GetInfo came since it
	everRegistered    bool
	synced            bool      // a publish was seen in the API server once
	pendingSince      time.Time // of the first publish not yet in the API server
	lastSliceErr      error
}

// DRA makes the DRA mode's collectors and probes for driver, whose kubelet
// registration socket is regSocket. Call it once, before serving.
func (m *Metrics) DRA(driver, regSocket string) *DRA {
	d := &DRA{m: m, driver: driver, regSocket: regSocket, scanned: map[string][2]int{}, start: m.probes.now(),
		slices: prometheus.NewGauge(prometheus.GaugeOpts{Name: m.prefix + "_resource_slices",
			Help: "ResourceSlices of this node's pool as published last."}),
		inSync: prometheus.NewGauge(prometheus.GaugeOpts{Name: m.prefix + "_resource_slices_in_sync",
			Help: "1 when the API server holds exactly the devices published last, else 0."}),
		publishes: prometheus.NewCounter(prometheus.CounterOpts{Name: m.prefix + "_resource_slice_publishes_total",
			Help: "Changes of this node's pool handed to the ResourceSlice controller."}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.prefix + "_claims_total",
			Help: "Claims prepared and unprepared for the kubelet (op prepare, unprepare; result ok, error)."}, []string{"op", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.prefix + "_claim_duration_seconds",
			Help:    "Time to prepare or unprepare one claim (op prepare, unprepare).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9)}, []string{"op"}),
	}
	m.reg.MustRegister(d.slices, d.inSync, d.publishes, d.claims, d.latency)
	for _, op := range []string{"prepare", "unprepare"} {
		d.latency.WithLabelValues(op)
		for _, r := range []string{"ok", "error"} {
			d.claims.WithLabelValues(op, r)
		}
	}
	for _, ev := range []deviceplugin.Event{deviceplugin.EventRegistered, deviceplugin.EventRegisterFailed, deviceplugin.EventKubeletRestart} {
		m.events.WithLabelValues(driver, string(ev))
	}
	m.mu.Lock()
	m.dra = d
	m.mu.Unlock()
	return d
}

// Scanned implements dramode.Observer.
func (d *DRA) Scanned(resource string, healthy, unhealthy int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.scanned[resource] = [2]int{healthy, unhealthy}
}

func (d *DRA) devices() map[string][2]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.scanned)
}

// Published implements dramode.Observer.
func (d *DRA) Published(slices, _ int, err error) {
	if err != nil {
		d.m.Error(d.driver, "publish")
		return
	}
	d.publishes.Inc()
	d.slices.Set(float64(slices))
	d.inSync.Set(0)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pendingSince.IsZero() {
		d.pendingSince = d.m.probes.now()
	}
}

// SlicesInSync implements dramode.Observer.
func (d *DRA) SlicesInSync() {
	d.inSync.Set(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.synced, d.pendingSince, d.lastSliceErr = true, time.Time{}, nil
}

// SliceError implements dramode.Observer.
func (d *DRA) SliceError(err error) {
	d.m.Error(d.driver, "publish")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastSliceErr = err
}

// Claim implements dramode.Observer.
func (d *DRA) Claim(op string, took time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
		d.m.Error(d.driver, op)
	}
	d.claims.WithLabelValues(op, result).Inc()
	d.latency.WithLabelValues(op).Observe(took.Seconds())
}

// Registered implements dramode.Observer. A registration after an earlier
// one is a kubelet restart: a running kubelet registers a driver once.
func (d *DRA) Registered(ok bool) {
	ev := deviceplugin.EventRegistered
	if !ok {
		ev = deviceplugin.EventRegisterFailed
	}
	d.m.Observe(d.driver, ev)
	d.mu.Lock()
	defer d.mu.Unlock()
	if ok && d.everRegistered {
		d.m.Observe(d.driver, deviceplugin.EventKubeletRestart)
	}
	if ok != d.registered {
		d.start = d.m.probes.now()
	}
	d.registered = ok
	d.everRegistered = d.everRegistered || ok
}

// live are /healthz's complaints in DRA mode: the registration socket is
// gone (no kubelet finds the driver again until it restarts), the kubelet
// has not registered the driver within the grace, or the published slices
// are not in the API server within the grace.
func (d *DRA) live() []error {
	var errs []error
	if fi, err := os.Stat(d.regSocket); err != nil || fi.Mode().Type() != os.ModeSocket {
		errs = append(errs, fmt.Errorf("%s: registration socket %s is gone: no kubelet can register the driver until it restarts", d.driver, d.regSocket))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var notRegistered time.Time
	if !d.registered {
		notRegistered = d.start
	}
	if bad, took := d.m.probes.overdue(notRegistered); bad {
		errs = append(errs, fmt.Errorf("%s: not registered with the kubelet for %s", d.driver, took.Round(time.Second)))
	}
	if bad, took := d.m.probes.overdue(d.pendingSince); bad {
		err := fmt.Errorf("%s: published ResourceSlices not in the API server after %s", d.driver, took.Round(time.Second))
		if d.lastSliceErr != nil {
			err = fmt.Errorf("%w (last error: %v)", err, d.lastSliceErr)
		}
		errs = append(errs, err)
	}
	return errs
}

// ready is /readyz in DRA mode: registered with the kubelet, and the slices
// were in the API server once.
func (d *DRA) ready() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case !d.registered:
		return fmt.Errorf("%s: not registered with the kubelet", d.driver)
	case !d.synced:
		return fmt.Errorf("%s: ResourceSlices not published yet", d.driver)
	}
	return nil
}
