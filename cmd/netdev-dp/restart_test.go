package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// kubeletRootEnv makes the test binary act as a kubelet process (the
// kubelet emulator on that root) instead of running tests, so that a test
// can kill a real kubelet process and start another.
const kubeletRootEnv = "NETDEV_DP_TEST_KUBELET_ROOT"

func TestMain(m *testing.M) {
	if root := os.Getenv(kubeletRootEnv); root != "" {
		os.Exit(serveKubelet(root))
	}
	os.Exit(m.Run())
}

func serveKubelet(root string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	node, err := kubeletsim.Start(ctx, root, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	<-ctx.Done()
	node.Stop()
	return 0
}

// startKubelet starts a kubelet process on root and waits until it serves.
func startKubelet(t *testing.T, root string) (*exec.Cmd, time.Time) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), kubeletRootEnv+"="+root)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("kubelet process did not start: %q %v", line, err)
	}
	return cmd, time.Now()
}

// waitAdvertised polls the kubelet process until res has n healthy devices.
func waitAdvertised(t *testing.T, root, res string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last map[string][]kubeletsim.Device
	for time.Now().Before(deadline) {
		if c, err := kubeletsim.NewControlClient(root); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			last, _ = c.Resources(ctx)
			cancel()
			if kubeletsim.CountHealthy(last[res]) == n {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s not advertised with %d healthy devices within %v; kubelet has %+v", res, n, within, last)
}

// TestReRegistersAfterKubeletProcessCrash kills the kubelet process
// (SIGKILL: its kubelet.sock stays behind, dead) and starts a new one on the
// same root: netdev-dp must be registered and listed again within 2 s.
func TestReRegistersAfterKubeletProcessCrash(t *testing.T) {
	bin := filepath.Join(testenv.Build(t, "./cmd/netdev-dp"), "netdev-dp")
	root, sockDir, work := t.TempDir(), t.TempDir(), t.TempDir()
	config := vhostUserSetup(t, sockDir, work, "a.sock", "b.sock")

	kubelet, _ := startKubelet(t, root)
	dp := exec.Command(bin, "--config", config, "--plugin-dir", kubeletsim.PluginDir(root),
		"--devinfo-dir", filepath.Join(work, "devinfo"), "--cdi-dir", filepath.Join(work, "cdi"))
	dp.Stderr = os.Stderr
	if err := dp.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { dp.Process.Kill(); dp.Wait() }()
	waitAdvertised(t, root, "example.com/vhu", 2, 20*time.Second)

	kubelet.Process.Kill()
	kubelet.Wait()
	startKubelet(t, root)
	waitAdvertised(t, root, "example.com/vhu", 2, 2*time.Second)

	dp.Process.Signal(syscall.SIGTERM)
	if err := dp.Wait(); err != nil {
		t.Fatalf("netdev-dp exit after SIGTERM: %v", err)
	}
}
