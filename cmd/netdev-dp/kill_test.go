package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestRestartAfterSIGKILL: a netdev-dp killed with SIGKILL leaves its
// socket, device-info files and CDI spec. The next start replaces the stale
// socket, removes the file of the device that went away meanwhile, keeps the
// file of the device that is still there, and SIGTERM then leaves nothing.
func TestRestartAfterSIGKILL(t *testing.T) {
	bin := filepath.Join(testenv.Build(t, "./cmd/netdev-dp"), "netdev-dp")
	root, sockDir, work := t.TempDir(), t.TempDir(), t.TempDir()
	node, err := kubeletsim.Start(context.Background(), root, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	// b.sock goes away while netdev-dp is dead: a vswitch port deleted.
	config := vhostUserSetup(t, sockDir, work, "a.sock", "b.sock")
	devinfoDir, cdiDir := filepath.Join(work, "devinfo"), filepath.Join(work, "cdi")
	store := devinfo.NewStore(devinfoDir)
	start := func() (*exec.Cmd, *bytes.Buffer) {
		t.Helper()
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "--config", config, "--plugin-dir", node.PluginDir(), "--devinfo-dir", devinfoDir, "--cdi-dir", cdiDir)
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, &stderr
	}
	waitDevices := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := node.WaitRegistered(ctx, "example.com/vhu"); err != nil {
			t.Fatal(err)
		}
		if err := node.WaitResources(ctx, func(r map[string][]kubeletsim.Device) bool { return len(r["example.com/vhu"]) == n }); err != nil {
			t.Fatalf("waiting for %d devices: %v; node has %+v", n, err, node.Resources())
		}
	}

	first, _ := start()
	waitDevices(2)
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	if _, err := store.ReadDP("example.com/vhu", "b.sock"); err != nil {
		t.Fatalf("SIGKILL should leave the files behind: %v", err)
	}
	if err := os.Remove(filepath.Join(sockDir, "b.sock")); err != nil {
		t.Fatal(err)
	}

	second, stderr := start()
	waitDevices(1)
	if _, err := store.ReadDP("example.com/vhu", "b.sock"); err == nil {
		t.Errorf("file of the device that went away kept after restart\n%s", stderr.String())
	}
	if _, err := store.ReadDP("example.com/vhu", "a.sock"); err != nil {
		t.Errorf("file of the device still there: %v", err)
	}
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
	for _, dir := range []string{filepath.Join(devinfoDir, "dp"), cdiDir} {
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s not empty after SIGTERM: %v", dir, entries)
		}
	}
}
