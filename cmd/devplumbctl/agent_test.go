package main

import (
	"bytes"
	"io"
	"net/http"
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

// devplumbctl agent listens on its socket, answers a hello with its build,
// and on SIGTERM stops, removes the socket and exits 0.
// With --listen it serves its metrics and keeps the phase spool of the
// calls that fall back, which it removes when it stops.
func TestAgentServesUntilSIGTERM(t *testing.T) {
	dir, err := os.MkdirTemp("", "ctlagent") // t.TempDir() may be too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "run", "agent.sock")
	state := filepath.Join(dir, "state")
	addr := testenv.FreeAddr(t)
	exit := make(chan int, 1)
	var stderr syncWriter
	go func() {
		exit <- run([]string{"agent", "--socket", socket, "--log-level", "debug", "--listen", addr, "--state-dir", state}, &stderr, &stderr)
	}()
	c := dialAgent(t, socket, exit)
	if c.Agent.Build != version.Get().String() || c.Agent.Protocol != agentproto.ProtocolVersion {
		t.Errorf("hello answered %+v, want build %s", c.Agent, version.Get())
	}
	c.Close()
	if _, err := os.Stat(filepath.Join(state, "phases")); err != nil {
		t.Errorf("phase spool while the agent runs: %v", err)
	}
	body := scrape(t, "http://"+addr+"/metrics")
	for _, m := range []string{"devplumb_agent_pending_calls 0", "devplumb_agent_cached_objects{kind=\"pod\"} 0"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %q:\n%s", m, body)
		}
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
	if _, err := os.Stat(filepath.Join(state, "phases")); !os.IsNotExist(err) {
		t.Errorf("phase spool after SIGTERM: %v, want it removed", err)
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

// scrape gets url's body, waiting up to 10 s for the server to listen.
func scrape(t *testing.T, url string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url) //nolint:gosec,noctx // a test's loopback URL
		if err == nil {
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
			}
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
