package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// The memory a flood may add to the agent: its DaemonSet's limit (96 MiB)
// less what it holds on a node without a flood (46 MiB, caches of a real
// cluster's pods and slices), which this test's agent, without a cluster,
// does not have.
const (
	memoryLimit = 96 << 20
	floodRoom   = (96 - 46) << 20
	floodConns  = 40
)

// A real agent (the devplumb-agent binary, default settings) flooded by 40
// root connections, each sending its hello, then a frame announcing the
// maximum (4 MiB) and all of it but a KiB, and holding it: the agent's
// resident memory stays under its DaemonSet's limit and grows by less than
// the room the limit leaves it; it ends every flooding connection within
// seconds (its frame wait or its byte budget), and then serves a normal
// call. An agent that allocated each announced frame held 160 MiB here.
func TestFloodedAgentStaysInItsMemory(t *testing.T) {
	socket, pid := startAgentBinary(t)
	base := procStatus(t, pid, "VmRSS")
	peak := watchRSS(t, pid)
	// Every connection is past its hello before any floods: on a loaded
	// machine a flood already under way could delay a later hello past the
	// agent's hello wait, which ends that connection as it should.
	var conns []net.Conn
	for range floodConns {
		conns = append(conns, floodConn(t, socket))
	}
	var writers sync.WaitGroup
	for _, c := range conns {
		writers.Go(func() {
			body := make([]byte, agentproto.MaxFrame-1024)
			c.SetWriteDeadline(time.Now().Add(time.Minute))
			c.Write(append(binary.BigEndian.AppendUint32(nil, agentproto.MaxFrame), body...)) // blocks until read or closed
		})
	}
	// A bound on a wait, not a speed: each ends within seconds (its frame
	// wait, 5 s, or its budget wait, 1 s) on an idle machine; on one
	// running other tests beside it the race-built writers take longer to
	// push their 160 MiB (30 s was too short once, at load 50).
	deadline := time.Now().Add(90 * time.Second)
	for i, c := range conns { // the agent ends each
		c.SetReadDeadline(deadline)
		if _, err := io.Copy(io.Discard, c); err != nil && !isReset(err) {
			t.Errorf("flooding connection %d not ended by the agent: %v", i, err)
		}
		c.Close()
	}
	writers.Wait()
	rss := peak()
	hwm := procStatus(t, pid, "VmHWM")
	t.Logf("agent VmRSS %d KiB before the flood, peak %d KiB during it, VmHWM %d KiB", base>>10, rss>>10, hwm>>10)
	if hwm >= memoryLimit || rss-base >= floodRoom {
		t.Errorf("flooded agent: VmHWM %d MiB (limit %d MiB), grew %d MiB (room %d MiB)", hwm>>20, memoryLimit>>20, (rss-base)>>20, floodRoom>>20)
	}
	c, err := agentproto.Dial(socket, 5*time.Second, "after-flood")
	if err != nil {
		t.Fatalf("hello after the flood: %v", err)
	}
	defer c.Close()
	if _, err := c.Prepare(context.Background(), &agentproto.Prepare{Command: agentproto.CmdAdd, ContainerID: "c1",
		IfName: "eth1", StdinData: []byte(`{"cniVersion":"1.0.0","name":"n","type":"devplumb"}`)}); err != nil {
		t.Errorf("prepare after the flood: %v, want it served", err)
	}
}

// startAgentBinary runs the built devplumb-agent on a socket of its own
// until the test ends.
func startAgentBinary(t *testing.T) (string, int) {
	t.Helper()
	dir, err := os.MkdirTemp("", "flood") // t.TempDir() may be too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "run", "agent.sock")
	cmd := exec.Command(filepath.Join(testenv.Build(t, "./cmd/devplumb-agent"), "devplumb-agent"),
		"--socket", socket, "--metrics-socket", "")
	var logs syncWriter
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("agent: %v\n%s", err, logs.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(socket); err == nil {
			return socket, cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no agent socket within 30s:\n%s", logs.String())
		}
	}
}

// floodConn is a connection past its hello.
func floodConn(t *testing.T, socket string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	hello := fmt.Sprintf(`{"hello":{"protocol":%d,"build":"flood"}}`, agentproto.ProtocolVersion)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(hello))), hello...)); err != nil {
		t.Fatal(err)
	}
	var prefix [4]byte
	if _, err := io.ReadFull(c, prefix[:]); err != nil {
		t.Fatalf("hello: %v", err)
	}
	answer := make([]byte, binary.BigEndian.Uint32(prefix[:]))
	if _, err := io.ReadFull(c, answer); err != nil || strings.Contains(string(answer), `"error"`) {
		t.Fatalf("hello answered %s, %v", answer, err)
	}
	c.SetDeadline(time.Time{})
	return c
}

// isReset is the agent closing a connection with bytes unread: the peer's
// reads end with a reset instead of EOF.
func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}

// watchRSS samples pid's VmRSS until the returned func is called, which
// returns the largest sample, or the test ends (before the agent stops).
func watchRSS(t *testing.T, pid int) func() uint64 {
	done := make(chan struct{})
	peak := make(chan uint64, 1)
	stop := sync.OnceValue(func() uint64 {
		close(done)
		return <-peak
	})
	t.Cleanup(func() { stop() })
	go func() {
		var most uint64
		for {
			most = max(most, procStatus(t, pid, "VmRSS"))
			select {
			case <-done:
				peak <- most
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return stop
}

// procStatus is a memory line of /proc/pid/status, in bytes.
func procStatus(t *testing.T, pid int, key string) uint64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Error(err)
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), key+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Error(err)
			}
			return kb << 10
		}
	}
	t.Errorf("/proc/%d/status has no %s", pid, key)
	return 0
}
