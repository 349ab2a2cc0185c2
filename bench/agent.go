package bench

// The node agent (issue 24): `devplumb-agent` as the DaemonSet runs it, the entry point
// devplumb talking to it over its unix socket.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// agentSocketEnv is where the entry point looks for the agent (else /run/devplumb/agent.sock).
const agentSocketEnv = "DEVPLUMB_AGENT_SOCKET"

// agentProc is a running `devplumb-agent`.
type agentProc struct {
	socket string
	// metrics is the unix socket it serves /metrics on.
	metrics string
	log     string
	cmd     *exec.Cmd
	exited  chan struct{}
	err     error // the process's exit, once exited is closed
}

// agentReadyBound bounds the wait for the agent's socket (informers sync before it serves).
const agentReadyBound = 2 * time.Minute

// startAgent runs `devplumb-agent --socket dir/run/agent.sock --metrics-socket
// dir/run/metrics.sock` and extra flags, its log in dir, and waits until it answers a hello.
func startAgent(cfg Config, dir string, extra ...string) (*agentProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	a := &agentProc{socket: filepath.Join(dir, "run", "agent.sock"), metrics: filepath.Join(dir, "run", "metrics.sock"),
		log: filepath.Join(dir, "agent.log"), exited: make(chan struct{})}
	logf, err := os.Create(a.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	a.cmd = exec.Command(cfg.Agent, append([]string{"--socket", a.socket, "--metrics-socket", a.metrics}, extra...)...)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start devplumb-agent: %w", err)
	}
	go func() { a.err = a.cmd.Wait(); close(a.exited) }()
	if err := a.waitReady(); err != nil {
		a.stop()
		return nil, fmt.Errorf("devplumb-agent: %w; its log:\n%s", err, tailFile(a.log, 20))
	}
	return a, nil
}

func (a *agentProc) waitReady() error {
	return waitReady(a.exited, func() error { return a.err }, agentReadyBound, 50*time.Millisecond, helloAnswered(a.socket))
}

// helloAnswered is waitReady's test of an agent on socket: it answers a hello.
func helloAnswered(socket string) func() error {
	return func() error {
		c, err := agentproto.Dial(socket, time.Second, "bench")
		if err == nil {
			c.Close()
		}
		return err
	}
}

// startAgent starts a node agent for the env under e.dir/name; close stops it. It serves
// the node bench-node, its client with the bench's kube-apiserver when there is one.
func (e *env) startAgent(name string, extra ...string) (*agentProc, error) {
	return e.keep(startAgent(e.cfg, filepath.Join(e.dir, name), extra...))
}

// keep records an agent that started, for the run's cleanup.
func (e *env) keep(a *agentProc, err error) (*agentProc, error) {
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.agents = append(e.agents, a)
	e.mu.Unlock()
	return a, nil
}

// agentFlags are the agent's flags for the bench's node, with kubeconfig ("" without an
// API server) for its client.
func agentFlags(cfg Config, kubeconfig string) []string {
	f := []string{"--node-name", kubeNodeName}
	if kubeconfig != "" {
		f = append(f, "--kubeconfig", kubeconfig) // its watches start at once, as in the DaemonSet
	}
	return f
}

// nodeConfigFlag is the agent's --node-config: the node config of the network net it
// serves (writeNet wrote it).
func (e *env) nodeConfigFlag(net string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return []string{"--node-config", e.nodeConfigs[net]}
}

// scrape reads the metrics the agent serves on its metrics socket.
func (a *agentProc) scrape() (string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", a.metrics)
		}}}
	resp, err := c.Get("http://agent/metrics")
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w", a.metrics, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scrape %s: %s: %v", a.metrics, resp.Status, err)
	}
	return string(b), nil
}

// metricValues are the samples of metric name in a Prometheus text exposition, by the
// value of its label (the whole label set when it has another, "" when none).
func metricValues(text, name, label string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, name) || (len(l) > len(name) && l[len(name)] != '{' && l[len(name)] != ' ') {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", l, err)
		}
		key := strings.TrimSpace(l[len(name):i])
		if k, ok := strings.CutPrefix(key, "{"+label+"=\""); ok && strings.HasSuffix(k, "\"}") && !strings.Contains(k, ",") {
			key = strings.TrimSuffix(k, "\"}")
		}
		out[key] += v
	}
	return out, nil
}

// env is the entry point's environment entry that sends its calls to this agent.
func (a *agentProc) env() string { return agentSocketEnv + "=" + a.socket }

// stop ends the agent (SIGTERM, then SIGKILL).
func (a *agentProc) stop() {
	if a == nil || a.cmd == nil || a.cmd.Process == nil {
		return
	}
	terminate(a.cmd.Process, a.exited, 10*time.Second)
}

// kill ends the agent at once, as a crash or an OOM kill would: its socket file stays.
func (a *agentProc) kill() {
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
}

// memory is the agent's resident memory now and at its peak, in MiB.
func (a *agentProc) memory() (rss, peak float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	if err != nil {
		return 0, 0, fmt.Errorf("agent memory: %w", err)
	}
	kib, err := statusKiB(string(b), "VmRSS", "VmHWM")
	if err != nil {
		return 0, 0, fmt.Errorf("agent memory: %w", err)
	}
	return kib[0] / 1024, kib[1] / 1024, nil
}

// statusKiB reads the named "Key:   123 kB" fields of a /proc/PID/status text.
func statusKiB(status string, keys ...string) ([]float64, error) {
	out := make([]float64, len(keys))
	found := make([]bool, len(keys))
	for _, l := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		for i, want := range keys {
			if k != want {
				continue
			}
			n, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", k, strings.TrimSpace(v), err)
			}
			out[i], found[i] = n, true
		}
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("no %s in the process status", keys[i])
		}
	}
	return out, nil
}
