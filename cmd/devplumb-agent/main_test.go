package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/base/version"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// devplumb-agent listens on its socket, answers a hello with its build,
// serves its metrics on its metrics socket, and on SIGTERM stops, removes
// both sockets and exits 0.
func TestAgentServesUntilSIGTERM(t *testing.T) {
	dir, err := os.MkdirTemp("", "agent") // t.TempDir() may be too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "run", "agent.sock")
	metricsSocket := filepath.Join(dir, "run", "agent-metrics.sock")
	exit := make(chan int, 1)
	var stderr syncWriter
	go func() {
		exit <- run([]string{"--socket", socket, "--log-level", "debug", "--metrics-socket", metricsSocket}, &stderr, &stderr)
	}()
	c := dialAgent(t, socket, exit)
	if c.Agent.Build != version.Get().String() || c.Agent.Protocol != agentproto.ProtocolVersion {
		t.Errorf("hello answered %+v, want build %s", c.Agent, version.Get())
	}
	c.Close()
	code, body := testenv.GetUnix(t, metricsSocket, "/metrics")
	for _, m := range []string{"devplumb_agent_pending_calls 0", "devplumb_agent_cached_objects{kind=\"pod\"} 0", "process_resident_memory_bytes"} {
		if code != 200 || !strings.Contains(body, m) {
			t.Errorf("/metrics: %d, lacks %q:\n%s", code, m, body)
		}
	}
	if st, err := os.Stat(metricsSocket); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("metrics socket %v, %v: want mode 0600", st, err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := <-exit; code != 0 {
		t.Fatalf("exit %d after SIGTERM: %s", code, stderr.String())
	}
	if _, err := os.Lstat(socket); !os.IsNotExist(err) {
		t.Errorf("socket after SIGTERM: %v, want it removed", err)
	}
	if _, err := os.Lstat(metricsSocket); !os.IsNotExist(err) {
		t.Errorf("metrics socket after SIGTERM: %v, want it removed", err)
	}
	if !strings.Contains(stderr.String(), "devplumb agent serving") {
		t.Errorf("log %q does not say it served", stderr.String())
	}
}

// dialAgent dials until the agent started in the background listens; it
// fails the test if the agent exits first.
func dialAgent(t *testing.T, socket string, exit <-chan int) *agentproto.Client {
	t.Helper()
	for {
		c, err := agentproto.Dial(socket, 5*time.Second, "ctl-test")
		if err == nil {
			return c
		}
		select {
		case code := <-exit:
			t.Fatalf("agent exited %d before serving: %v", code, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// syncWriter is the agent's stderr, written by its goroutines and read here.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
