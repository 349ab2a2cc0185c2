package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// devplumbctl metrics turns the phases of real devplumb calls into histograms: an
// ADD, a failing ADD and a DEL are each counted once per phase and outcome, and
// when the daemon stops its spool goes, so calls leave no records behind.
func TestPhaseHistograms(t *testing.T) {
	e, pod := macvlanPod(t, "dpv")
	url, stop := startPhaseMetrics(t, e.stateDir)
	t.Setenv("DEVPLUMB_AGENT_SOCKET", filepath.Join(t.TempDir(), "none.sock")) // whatever runs here

	e.mustCnitool("add", "mv-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	if _, _, err := e.cnitool("add", "mv-net", pod.Path(), "net2", podArgs("default", "nodevice"), ""); err == nil {
		t.Fatal("ADD for a pod without a device succeeded")
	}
	e.mustCnitool("del", "mv-net", pod.Path(), "net1", podArgs("default", "p1"), "")

	fams := scrape(t, url)
	for _, c := range []struct {
		family string
		labels map[string]string
		want   uint64
	}{
		{"devplumb_phase_duration_seconds", map[string]string{"op": "ADD", "phase": "delegate", "network": "mv-net"}, 1},
		{"devplumb_phase_duration_seconds", map[string]string{"op": "ADD", "phase": "config"}, 2},
		{"devplumb_phase_duration_seconds", map[string]string{"op": "DEL", "phase": "delegate"}, 1},
		{"devplumb_call_duration_seconds", map[string]string{"op": "ADD", "result": "ok"}, 1},
		{"devplumb_call_duration_seconds", map[string]string{"op": "ADD", "result": "error"}, 1},
		{"devplumb_call_duration_seconds", map[string]string{"op": "DEL", "result": "ok"}, 1},
	} {
		if got := histogramCount(fams, c.family, c.labels); got != c.want {
			t.Errorf("%s%v: count %d, want %d", c.family, c.labels, got, c.want)
		}
	}
	// A second scrape sees the same counts: each record is observed once.
	if got := histogramCount(scrape(t, url), "devplumb_call_duration_seconds", map[string]string{"op": "ADD", "result": "ok"}); got != 1 {
		t.Errorf("second scrape: ADD ok count %d, want 1", got)
	}

	stop()
	spool := filepath.Join(e.stateDir, phasespool.SpoolDir)
	if _, err := os.Stat(spool); !os.IsNotExist(err) {
		t.Fatalf("spool after the daemon stopped: %v", err)
	}
	e.mustCnitool("add", "mv-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	e.mustCnitool("del", "mv-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	if _, err := os.Stat(spool); !os.IsNotExist(err) {
		t.Errorf("calls without a daemon made the spool: %v", err)
	}
}

// startPhaseMetrics runs devplumbctl metrics on stateDir (with the node agent's
// metrics socket, when given) until stop (SIGTERM, which must end it with status 0).
func startPhaseMetrics(t *testing.T, stateDir string, agentMetrics ...string) (url string, stop func()) {
	t.Helper()
	bin := testenv.Build(t, "./cmd/devplumbctl")
	port, err := kubeapi.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var stderr strings.Builder
	cmd := exec.Command(filepath.Join(bin, "devplumbctl"), "metrics", "--listen", addr, "--state-dir", stateDir,
		"--agent-metrics", strings.Join(agentMetrics, ""))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := <-done; err != nil {
			t.Errorf("devplumbctl metrics after SIGTERM: %v\n%s", err, stderr.String())
		}
	}
	t.Cleanup(stop)
	url = "http://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if r, err := http.Get(url + "/healthz"); err == nil {
			r.Body.Close()
			return url, stop
		}
		select {
		case <-ctx.Done():
			t.Fatalf("devplumbctl metrics never answered:\n%s", stderr.String())
		case err := <-done:
			t.Fatalf("devplumbctl metrics exited: %v\n%s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	r, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// histogramCount sums the sample counts of family's series that carry labels.
func histogramCount(fams map[string]*dto.MetricFamily, family string, labels map[string]string) uint64 {
	return uint64(sumSeries(fams, family, labels, func(m *dto.Metric) float64 { return float64(m.GetHistogram().GetSampleCount()) }))
}

// sumSeries adds value over family's series that carry labels.
func sumSeries(fams map[string]*dto.MetricFamily, family string, labels map[string]string, value func(*dto.Metric) float64) float64 {
	var n float64
	for _, m := range fams[family].GetMetric() {
		if hasLabels(m, labels) {
			n += value(m)
		}
	}
	return n
}

// hasLabels tells whether m carries labels (and maybe more).
func hasLabels(m *dto.Metric, labels map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range labels {
		if have[k] != v {
			return false
		}
	}
	return true
}

// macvlanPod is a node whose pod default/p1 was given a veth (named from
// stem) as the device of network mv-net (macvlan on it), and its netns.
func macvlanPod(t *testing.T, stem string) (*env, ns.NetNS) {
	t.Helper()
	e := newEnv(t)
	dev := testenv.VethPair(t, stem) + "a"
	pod := testenv.NetNS(t)
	e.setPod("default", "p1", dev)
	conf := e.conf("mv-net", map[string]any{"type": "macvlan", "mode": "bridge"})
	conf["injectDeviceID"] = []string{"master"}
	e.install(conf)
	return e, pod
}
