package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// With the node agent running, cnitool's ADD and DEL through the entry point
// are the agent's calls, and devplumbctl metrics serves the agent's metrics
// beside its own: the calls' histograms with path="agent", the agent's
// requests, its process's memory under the agent's prefix. With the agent
// stopped, the next ADD falls back to devplumb-direct (path="direct") and
// the scrape still answers.
func TestAgentMetricsServedByDevplumbctl(t *testing.T) {
	e, pod := macvlanPod(t, "dpa")
	dir, err := os.MkdirTemp("", "agent") // t.TempDir() may be too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket, metricsSocket := filepath.Join(dir, "agent.sock"), filepath.Join(dir, "agent-metrics.sock")
	stopAgent := startAgent(t, socket, metricsSocket, e.nodeConfigs["mv-net"])
	t.Setenv("DEVPLUMB_AGENT_SOCKET", socket)
	url, _ := startPhaseMetrics(t, e.stateDir, metricsSocket)

	e.mustCnitool("add", "mv-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	e.mustCnitool("del", "mv-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	fams := scrape(t, url)
	for op, want := range map[string]uint64{"ADD": 1, "DEL": 1} {
		if got := histogramCount(fams, "devplumb_call_duration_seconds", map[string]string{"op": op, "path": "agent"}); got != want {
			t.Errorf("%s calls with path=agent: %d, want %d", op, got, want)
		}
	}
	if got := counter(fams, "devplumb_agent_requests_total", map[string]string{"request": "commit", "command": "ADD", "outcome": "ok"}); got != 1 {
		t.Errorf("the agent's ADD commits: %v, want 1", got)
	}
	if fams["devplumb_agent_process_resident_memory_bytes"] == nil || fams["process_resident_memory_bytes"] == nil {
		t.Error("the agent's and devplumbctl's process memory are not both served")
	}

	stopAgent()
	e.mustCnitool("add", "mv-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	e.mustCnitool("del", "mv-net", pod.Path(), "net1", podArgs("default", "p1"), "")
	fams = scrape(t, url)
	if got := histogramCount(fams, "devplumb_call_duration_seconds", map[string]string{"op": "ADD", "path": "direct"}); got != 1 {
		t.Errorf("ADD calls with path=direct after the agent stopped: %d, want 1", got)
	}
	if fams["devplumb_agent_requests_total"] != nil {
		t.Error("a stopped agent's metrics are still served")
	}
}

// startAgent runs devplumb-agent on socket, with the node config nodeConfig
// (the one the test's calls name), until the returned stop (SIGTERM, which
// must end it with status 0).
func startAgent(t *testing.T, socket, metricsSocket, nodeConfig string) (stop func()) {
	t.Helper()
	cmd := exec.Command(filepath.Join(testenv.Build(t, "./cmd/devplumb-agent"), "devplumb-agent"),
		"--socket", socket, "--metrics-socket", metricsSocket, "--node-name", "e2e-node", "--node-config", nodeConfig)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("devplumb-agent after SIGTERM: %v\n%s", err, stderr.String())
		}
	}
	t.Cleanup(stop)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(metricsSocket); err == nil {
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatalf("devplumb-agent never listened:\n%s", stderr.String())
		}
	}
}

// counter is the value of family's counter series that carry labels.
func counter(fams map[string]*dto.MetricFamily, family string, labels map[string]string) float64 {
	return sumSeries(fams, family, labels, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
}
