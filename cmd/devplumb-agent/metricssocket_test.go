package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// peerEnv names the metrics socket a re-run of this test binary scrapes, as
// a client of another uid (TestMain).
const peerEnv = "DEVPLUMB_AGENT_TEST_METRICS_PEER"

// metricsUser is the DaemonSet's metrics container's uid and gid.
const metricsUser = 65532

func TestMain(m *testing.M) {
	if socket := os.Getenv(peerEnv); socket != "" {
		fmt.Print(scrape(socket))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// scrape GETs /metrics on socket: "200 <body>", or "refused: <why>".
func scrape(socket string) string {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	resp, err := client.Get("http://agent/metrics")
	if err != nil {
		return "refused: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

// With --metrics-socket-gid and --metrics-peer-uid (the DaemonSet's non-root metrics
// container), the metrics socket is 0660 and the group's, in a directory the agent makes
// 0750 for the group; the admitted uid scrapes it, root too, and a process of another uid
// is refused even in the group (the peer check, not only the file mode). With
// --metrics-state-dir the agent drains devplumb-direct's phase spool into its metrics
// (path="direct") and removes the spool when it stops.
func TestMetricsSocketForTheMetricsUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the socket is given to another group, clients run as other uids")
	}
	dir, err := os.MkdirTemp("", "agent") // t.TempDir() may be too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	must(t, os.Chmod(dir, 0o755)) // the other uids run the test binary from here
	socket, metricsSocket := filepath.Join(dir, "run", "agent.sock"), filepath.Join(dir, "metrics", "agent-metrics.sock")
	stateDir := filepath.Join(dir, "state")
	must(t, os.Mkdir(stateDir, 0o700))
	exit := make(chan int, 1)
	var stderr syncWriter
	go func() {
		exit <- run([]string{"--socket", socket, "--metrics-socket", metricsSocket, "--metrics-socket-gid", "65532",
			"--metrics-peer-uid", "65532", "--metrics-state-dir", stateDir}, &stderr, &stderr)
	}()
	dialAgent(t, socket, exit).Close()
	checkOwner(t, metricsSocket, 0o660)
	checkOwner(t, filepath.Dir(metricsSocket), 0o750)
	rec := phasespool.Record{Op: "ADD", Network: "net-a", Phases: []attachment.Phase{{Name: "delegate", Duration: time.Millisecond}}}
	must(t, phasespool.Drop(stateDir, rec))

	peer := copyTestBinary(t, dir)
	got := runPeer(t, peer, metricsSocket, metricsUser, metricsUser)
	if want := `devplumb_call_duration_seconds_count{network="net-a",op="ADD",path="direct",result="ok"} 1`; !strings.HasPrefix(got, "200 ") ||
		!strings.Contains(got, want) || !strings.Contains(got, "devplumb_agent_pending_calls") {
		t.Errorf("uid %d scraped %.300q, want 200 with the agent's metrics and %s", metricsUser, got, want)
	}
	if code, _ := testenv.GetUnix(t, metricsSocket, "/metrics"); code != 200 {
		t.Errorf("root scraped %d", code)
	}
	if got := runPeer(t, peer, metricsSocket, 65534, metricsUser); !strings.HasPrefix(got, "refused: ") {
		t.Errorf("uid 65534 in group %d scraped %.200q, want it refused", metricsUser, got)
	}
	must(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	if code := <-exit; code != 0 {
		t.Fatalf("exit %d after SIGTERM: %s", code, stderr.String())
	}
	if _, err := os.Lstat(filepath.Join(stateDir, phasespool.SpoolDir)); !os.IsNotExist(err) {
		t.Errorf("phase spool after SIGTERM: %v, want it removed", err)
	}
	if !strings.Contains(stderr.String(), "uid 65534") {
		t.Errorf("the refusal is not logged: %s", stderr.String())
	}
}

// Half the setting is refused at start: the group alone admits no one, the uid alone
// cannot open a 0600 socket.
func TestMetricsAccessGoesTogether(t *testing.T) {
	for _, args := range [][]string{{"--metrics-socket-gid", "65532"}, {"--metrics-peer-uid", "65532"}} {
		var stderr strings.Builder
		if code := run(args, &stderr, &stderr); code != 2 || !strings.Contains(stderr.String(), "go together") {
			t.Errorf("%v: exit %d, %q; want 2 saying they go together", args, code, stderr.String())
		}
	}
}

func checkOwner(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != mode || sys.Uid != 0 || sys.Gid != metricsUser {
		t.Errorf("%s: mode %v, owner %d:%d; want %v, 0:%d", path, st.Mode().Perm(), sys.Uid, sys.Gid, mode, metricsUser)
	}
}

// copyTestBinary puts this test binary where other uids may run it.
func copyTestBinary(t *testing.T, dir string) string {
	t.Helper()
	exe, err := os.Executable()
	must(t, err)
	b, err := os.ReadFile(exe)
	must(t, err)
	path := filepath.Join(dir, "peer.test")
	must(t, os.WriteFile(path, b, 0o755))
	return path
}

// runPeer runs the test binary as a scraping client of uid, with gid as its only group.
func runPeer(t *testing.T, peer, socket string, uid, gid uint32) string {
	t.Helper()
	cmd := exec.Command(peer)
	cmd.Dir = filepath.Dir(peer)
	cmd.Env = append(os.Environ(), peerEnv+"="+socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("peer as uid %d: %v\n%s", uid, err, out)
	}
	return string(out)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The agent of the DaemonSet holds no CAP_CHOWN (CAP_DAC_OVERRIDE only): it
// gives its metrics socket to the metrics group because it is a member (the
// pod's supplementalGroups), as an owner may; not a member, it fails at start
// saying so. Run as the DaemonSet runs it, under setpriv.
func TestMetricsSocketGroupWithoutChown(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if os.Getuid() != 0 || err != nil {
		t.Skip("needs root and setpriv (util-linux)")
	}
	bin := filepath.Join(testenv.Build(t, "./cmd/devplumb-agent"), "devplumb-agent")
	for _, member := range []bool{true, false} {
		dir, err := os.MkdirTemp("", "agent") // t.TempDir() may be too long for a socket path
		must(t, err)
		defer os.RemoveAll(dir)
		metricsSocket := filepath.Join(dir, "metrics", "agent-metrics.sock")
		groups := "0"
		if member {
			groups = fmt.Sprint(metricsUser)
		}
		cmd := exec.CommandContext(t.Context(), setpriv, "--bounding-set=-all,+dac_override", "--inh-caps=-all", "--groups="+groups, "--",
			bin, "--socket", filepath.Join(dir, "agent.sock"), "--metrics-socket", metricsSocket, "--node-config", filepath.Join(dir, "node.json"),
			"--metrics-socket-gid", fmt.Sprint(metricsUser), "--metrics-peer-uid", fmt.Sprint(metricsUser))
		var stderr syncWriter
		cmd.Stderr = &stderr
		must(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if !member {
			if err := <-exited; err == nil || !strings.Contains(stderr.String(), "operation not permitted") {
				t.Errorf("not in group %d: exit %v, stderr %s: want a start failure naming the chown", metricsUser, err, stderr.String())
			}
			continue
		}
		waitFile(t, metricsSocket, exited, &stderr)
		checkOwner(t, metricsSocket, 0o660)
		must(t, cmd.Process.Signal(syscall.SIGTERM))
		if err := <-exited; err != nil {
			t.Errorf("exit after SIGTERM: %v: %s", err, stderr.String())
		}
	}
}

// waitFile waits for path while the process has not exited.
func waitFile(t *testing.T, path string, exited <-chan error, stderr fmt.Stringer) {
	t.Helper()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("exited before %s: %v: %s", path, err, stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
