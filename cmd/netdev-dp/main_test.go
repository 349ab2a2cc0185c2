package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
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
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source/socket"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// binNode is a kubelet emulator, a vhost-user socket dir and the
// directories of one netdev-dp binary run.
type binNode struct {
	t                    *testing.T
	bin, config, sockDir string
	devinfoDir, cdiDir   string
	node                 *kubeletsim.Node
	store                *devinfo.Store
}

func newBinNode(t *testing.T, sockets ...string) *binNode {
	t.Helper()
	b := &binNode{t: t, bin: filepath.Join(testenv.Build(t, "./cmd/netdev-dp"), "netdev-dp"), sockDir: t.TempDir()}
	node, err := kubeletsim.Start(context.Background(), t.TempDir(), slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Stop)
	b.node = node
	work := t.TempDir()
	b.config = vhostUserSetup(t, b.sockDir, work, sockets...)
	b.devinfoDir, b.cdiDir = filepath.Join(work, "devinfo"), filepath.Join(work, "cdi")
	b.store = devinfo.NewStore(b.devinfoDir)
	return b
}

// start runs the binary, asking the emulator's PodResources at stop; it is
// killed when the test ends.
func (b *binNode) start() (*exec.Cmd, *bytes.Buffer) {
	b.t.Helper()
	return b.startWith("--pod-resources-socket", b.node.PodResourcesSocket())
}

// startWith runs the binary with args added; it is killed when the test ends.
func (b *binNode) startWith(args ...string) (*exec.Cmd, *bytes.Buffer) {
	b.t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(b.bin, append([]string{"--config", b.config, "--plugin-dir", b.node.PluginDir(),
		"--devinfo-dir", b.devinfoDir, "--cdi-dir", b.cdiDir}, args...)...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, &stderr
}

// waitDevices waits until the plugin is registered with n devices.
func (b *binNode) waitDevices(n int, stderr *bytes.Buffer) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.node.WaitRegistered(ctx, "example.com/vhu"); err != nil {
		b.t.Fatalf("%v\n%s", err, stderr.String())
	}
	if err := b.node.WaitResources(ctx, func(r map[string][]kubeletsim.Device) bool { return len(r["example.com/vhu"]) == n }); err != nil {
		b.t.Fatalf("waiting for %d devices: %v; node has %+v\n%s", n, err, b.node.Resources(), stderr.String())
	}
}

// waitHealthy waits until the node lists n healthy devices of the resource:
// 0 once it saw a killed plugin's stream break, n once the next one registered.
func (b *binNode) waitHealthy(n int, stderr *bytes.Buffer) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := b.node.WaitResources(ctx, func(r map[string][]kubeletsim.Device) bool { return kubeletsim.CountHealthy(r["example.com/vhu"]) == n })
	if err != nil {
		b.t.Fatalf("waiting for %d healthy devices: %v; node has %+v\n%s", n, err, b.node.Resources(), stderr.String())
	}
}

// sigterm stops the binary and checks that it left nothing behind.
func (b *binNode) sigterm(cmd *exec.Cmd, stderr *bytes.Buffer) {
	b.t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		b.t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
	for _, dir := range []string{filepath.Join(b.devinfoDir, "dp"), b.cdiDir} {
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			b.t.Errorf("%s not empty after SIGTERM: %v", dir, entries)
		}
	}
	entries, _ := os.ReadDir(b.node.PluginDir())
	for _, e := range entries {
		if e.Name() != "kubelet.sock" {
			b.t.Errorf("left in plugin dir after SIGTERM: %s", e.Name())
		}
	}
}

// TestSIGTERMLeavesNothing runs the built binary against the kubelet
// emulator and checks that SIGTERM removes its socket, its device-info files
// and its CDI spec.
func TestSIGTERMLeavesNothing(t *testing.T) {
	b := newBinNode(t, "a.sock", "b.sock")
	cmd, stderr := b.start()
	b.waitDevices(2, stderr)
	if _, err := b.store.ReadDP("example.com/vhu", "a.sock"); err != nil {
		t.Fatalf("no device-info while running: %v", err)
	}
	if entries, _ := os.ReadDir(b.cdiDir); len(entries) != 1 {
		t.Fatalf("CDI dir while running: %v", entries)
	}
	b.sigterm(cmd, stderr)
}

func TestUsageErrors(t *testing.T) {
	var out bytes.Buffer
	if code := run(nil, io.Discard, &out); code != 2 || !strings.Contains(out.String(), "--config") {
		t.Errorf("no args: code %d, %s", code, out.String())
	}
	out.Reset()
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"resources": [{"resourceName": "x"}]}`), 0o644)
	if code := run([]string{"--config", bad}, io.Discard, &out); code != 1 || !strings.Contains(out.String(), "resources[0]") {
		t.Errorf("bad config: code %d, %s", code, out.String())
	}
}

// vhostUserSetup listens on the sockets (closed when the test ends) in
// sockDir and writes a config for a client-mode vhost-user source of them,
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
	return writeConfig(t, filepath.Join(work, "config.json"), vhostUser("example.com/vhu", sockDir))
}

// vhostUser is a resource of the client-mode vhost-user sockets in dir.
func vhostUser(name, dir string) resources.Resource {
	return resources.Resource{ResourceName: name, VhostUser: &socket.VhostUser{SocketDir: dir, Mode: "client"}}
}

// writeConfig writes a config file of the resources to path and returns path.
func writeConfig(t *testing.T, path string, rs ...resources.Resource) string {
	t.Helper()
	data, err := json.Marshal(resources.Config{Resources: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
