package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// The whole path with the real agent (devplumb-agent) and an entry point
// with no devplumb-direct beside it, so nothing but the agent can do the
// call: ADD leaves the interface in the pod and the record complete (written
// by the agent), with the address the delegate gave; DEL removes both.
func TestRealAgent(t *testing.T) {
	n := newNode(t)
	lone := loneEntry(t, n)
	agent := exec.Command(filepath.Join(testenv.Build(t, "./cmd/devplumb-agent"), "devplumb-agent"), "--socket", n.socket,
		"--metrics-socket", filepath.Join(filepath.Dir(n.socket), "agent-metrics.sock"))
	agent.Env = runtimeEnviron() // the DaemonSet's: no devplumb above it
	logFile := filepath.Join(t.TempDir(), "agent.log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	agent.Stdout, agent.Stderr = f, f
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		if err := agent.Wait(); err != nil {
			t.Errorf("agent: %v\n%s", err, agentLogs(logFile))
		}
	})
	waitSocket(t, n.socket)
	out, err := n.loneRun(lone, "ADD", []string{"CNI_ARGS=" + podArgs})
	recs := n.records()
	if err != nil || !strings.Contains(string(out), "192.0.2.10/24") || len(recs) != 1 || !recs[0].Complete || !n.hasLink("eth1") {
		t.Fatalf("ADD through the agent: %v %s; records %+v, eth1 in pod %v\nagent: %s", err, out, recs, n.hasLink("eth1"), agentLogs(logFile))
	}
	if out, err := n.loneRun(lone, "DEL", []string{"CNI_ARGS=" + podArgs}); err != nil || len(n.records()) != 0 || n.hasLink("eth1") {
		t.Fatalf("DEL through the agent: %v %s; records %+v\nagent: %s", err, out, n.records(), agentLogs(logFile))
	}
}

// agentLogs is what the agent logged so far.
func agentLogs(file string) string {
	b, _ := os.ReadFile(file)
	return string(b)
}

// waitSocket waits for the agent's socket (a bound on a wait, not a speed
// assertion).
func waitSocket(t *testing.T, socket string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(socket); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no agent socket %s within 30s", socket)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
