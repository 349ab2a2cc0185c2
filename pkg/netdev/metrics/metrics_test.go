package metrics

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
)

// clock is a probe clock the test moves by hand: no test waits for real time.
type clock struct{ t time.Time }

func (c *clock) now() time.Time               { return c.t }
func (c *clock) add(d time.Duration)          { c.t = c.t.Add(d) }
func withClock(m *Metrics, c *clock) *Metrics { m.probes.now = c.now; return m }

// plugin is a device plugin resource whose registration the test switches.
type plugin struct {
	name       string
	registered atomic.Bool
}

func (p *plugin) ResourceName() string { return p.name }
func (p *plugin) Devices() []deviceplugin.Device {
	return []deviceplugin.Device{{ID: "a", Healthy: true}, {ID: "b"}}
}
func (p *plugin) Registered() bool { return p.registered.Load() }

// probe asks one endpoint of m's handler.
func probe(t *testing.T, m *Metrics, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func wantProbe(t *testing.T, m *Metrics, path string, code int, text string) {
	t.Helper()
	if got, body := probe(t, m, path); got != code || !strings.Contains(body, text) {
		t.Errorf("%s = %d %q, want %d and %q", path, got, body, code, text)
	}
}

// scrape parses /metrics with the Prometheus text parser.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	_, body := probe(t, m, "/metrics")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return fams
}

// value is the sample of family name whose labels include all of labels.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, s := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range s.Label {
				found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
			}
			if !found {
				continue next
			}
		}
		switch {
		case s.Counter != nil:
			return s.Counter.GetValue()
		case s.Gauge != nil:
			return s.Gauge.GetValue()
		case s.Histogram != nil:
			return float64(s.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no sample of %s with %v", name, labels)
	return 0
}

// TestDevicePluginProbes: /healthz fails only when a resource stays unregistered for
// longer than the grace, and recovers when it registers again; /readyz follows the
// registration at once.
func TestDevicePluginProbes(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	m := withClock(New("t"), c)
	wantProbe(t, m, "/readyz", 503, "no resource is served yet")
	p := &plugin{name: "example.com/vf"}
	m.Add(p)
	wantProbe(t, m, "/readyz", 503, "example.com/vf: not registered with the kubelet")
	wantProbe(t, m, "/healthz", 200, "ok")
	c.add(DefaultGrace)
	wantProbe(t, m, "/healthz", 503, "example.com/vf: not registered with the kubelet for 1m0s")
	p.registered.Store(true)
	wantProbe(t, m, "/healthz", 200, "ok")
	wantProbe(t, m, "/readyz", 200, "ok")
	// The kubelet goes: the grace starts again from when it was seen gone.
	p.registered.Store(false)
	wantProbe(t, m, "/healthz", 200, "ok")
	c.add(DefaultGrace - time.Second)
	wantProbe(t, m, "/healthz", 200, "ok")
	c.add(time.Second)
	wantProbe(t, m, "/healthz", 503, "not registered with the kubelet for 1m0s")
	m.SetGrace(0)
	p.registered.Store(true)
	wantProbe(t, m, "/healthz", 200, "ok")

	fams := scrape(t, m)
	if v := value(t, fams, "t_devices", "resource", "example.com/vf", "health", "unhealthy"); v != 1 {
		t.Errorf("unhealthy devices %v, want 1", v)
	}
}

// regSocket is a listening unix socket, as kubeletplugin's registration socket.
func regSocket(t *testing.T) (string, net.Listener) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "drv-reg.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return path, l
}

// TestDRAProbes: in DRA mode /readyz waits for the registration and the first
// publish the API server holds; /healthz fails when the registration socket is
// gone, and after the grace when the kubelet has not registered the driver or
// published slices do not reach the API server.
func TestDRAProbes(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	sock, l := regSocket(t)
	m := withClock(New("t"), c)
	d := m.DRA("drv.example.com", sock)
	wantProbe(t, m, "/readyz", 503, "drv.example.com: not registered with the kubelet")
	wantProbe(t, m, "/healthz", 200, "ok")
	c.add(DefaultGrace)
	wantProbe(t, m, "/healthz", 503, "drv.example.com: not registered with the kubelet for 1m0s")

	d.Registered(true)
	wantProbe(t, m, "/healthz", 200, "ok")
	wantProbe(t, m, "/readyz", 503, "ResourceSlices not published yet")
	d.Published(1, 3, nil)
	d.SliceError(errors.New("resourceslices is forbidden"))
	c.add(DefaultGrace - time.Second)
	wantProbe(t, m, "/healthz", 200, "ok")
	c.add(time.Second)
	wantProbe(t, m, "/healthz", 503, "published ResourceSlices not in the API server after 1m0s (last error: resourceslices is forbidden)")
	wantProbe(t, m, "/readyz", 503, "ResourceSlices not published yet")
	d.SlicesInSync()
	wantProbe(t, m, "/healthz", 200, "ok")
	wantProbe(t, m, "/readyz", 200, "ok")

	// A new kubelet registers the driver again: a kubelet restart.
	d.Registered(true)
	d.Claim("prepare", 2*time.Millisecond, nil)
	d.Claim("prepare", time.Millisecond, errors.New("no such device"))
	d.Claim("unprepare", time.Millisecond, nil)
	d.Scanned("example.com/vf", 3, 1)
	fams := scrape(t, m)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"t_plugin_events_total", []string{"resource", "drv.example.com", "event", "registered"}, 2},
		{"t_plugin_events_total", []string{"event", "kubelet_restart"}, 1},
		{"t_plugin_events_total", []string{"event", "register_failed"}, 0},
		{"t_claims_total", []string{"op", "prepare", "result", "ok"}, 1},
		{"t_claims_total", []string{"op", "prepare", "result", "error"}, 1},
		{"t_claims_total", []string{"op", "unprepare", "result", "error"}, 0},
		{"t_claim_duration_seconds", []string{"op", "prepare"}, 2},
		{"t_errors_total", []string{"op", "prepare"}, 1},
		{"t_errors_total", []string{"op", "publish"}, 1},
		{"t_resource_slices", nil, 1},
		{"t_resource_slice_publishes_total", nil, 1},
		{"t_resource_slices_in_sync", nil, 1},
		{"t_devices", []string{"resource", "example.com/vf", "health", "healthy"}, 3},
		{"t_devices", []string{"resource", "example.com/vf", "health", "unhealthy"}, 1},
	} {
		if got := value(t, fams, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}

	// The kubelet refuses the driver; then its socket goes.
	d.Registered(false)
	wantProbe(t, m, "/readyz", 503, "not registered with the kubelet")
	m.SetGrace(0)
	wantProbe(t, m, "/healthz", 503, "not registered with the kubelet for 0s")
	d.Registered(true)
	wantProbe(t, m, "/healthz", 200, "ok")
	l.Close() // removes the socket file
	wantProbe(t, m, "/healthz", 503, "registration socket "+sock+" is gone")
}
