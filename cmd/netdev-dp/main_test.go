package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestSIGTERMLeavesNothing runs the built binary against the kubelet
// emulator and checks that SIGTERM removes its socket, its device-info files
// and its CDI spec.
func TestSIGTERMLeavesNothing(t *testing.T) {
	bin := filepath.Join(testenv.Build(t, "./cmd/netdev-dp"), "netdev-dp")
	root, sockDir, work := t.TempDir(), t.TempDir(), t.TempDir()
	node, err := kubeletsim.Start(context.Background(), root, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	config := vhostUserSetup(t, sockDir, work, "a.sock", "b.sock")
	devinfoDir, cdiDir := filepath.Join(work, "devinfo"), filepath.Join(work, "cdi")

	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--config", config, "--plugin-dir", node.PluginDir(), "--devinfo-dir", devinfoDir, "--cdi-dir", cdiDir)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := node.WaitRegistered(ctx, "example.com/vhu"); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if _, err := devinfo.NewStore(devinfoDir).ReadDP("example.com/vhu", "a.sock"); err != nil {
		t.Fatalf("no device-info while running: %v", err)
	}
	if entries, _ := os.ReadDir(cdiDir); len(entries) != 1 {
		t.Fatalf("CDI dir while running: %v", entries)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
	for _, dir := range []string{filepath.Join(devinfoDir, "dp"), cdiDir} {
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s not empty after SIGTERM: %v", dir, entries)
		}
	}
	entries, _ := os.ReadDir(node.PluginDir())
	for _, e := range entries {
		if e.Name() != "kubelet.sock" {
			t.Errorf("left in plugin dir after SIGTERM: %s", e.Name())
		}
	}
}

func TestUsageErrors(t *testing.T) {
	var out bytes.Buffer
	if code := run(nil, &out); code != 2 || !strings.Contains(out.String(), "--config") {
		t.Errorf("no args: code %d, %s", code, out.String())
	}
	out.Reset()
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"resources": [{"resourceName": "x"}]}`), 0o644)
	if code := run([]string{"--config", bad}, &out); code != 1 || !strings.Contains(out.String(), "resources[0]") {
		t.Errorf("bad config: code %d, %s", code, out.String())
	}
}

// vhostUserSetup listens on the sockets (closed when the test ends) in
// sockDir and writes a config for a client-mode vhost-user pool of them,
// resource example.com/vhu, into work. It returns the config path.
func vhostUserSetup(t *testing.T, sockDir, work string, sockets ...string) string {
	t.Helper()
	for _, s := range sockets {
		l, err := net.Listen("unix", filepath.Join(sockDir, s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	cfg, err := json.Marshal(map[string]any{"resources": []map[string]any{
		{"resourceName": "example.com/vhu", "vhostUser": map[string]string{"socketDir": sockDir, "mode": "client"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(work, "config.json")
	if err := os.WriteFile(config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return config
}
