package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/base/failpoint"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// A --plugin-dir whose parent does not exist is an error naming it, and
// netdev-dp creates nothing: not the parents, not the dir.
func TestPluginDirParentsAreNotCreated(t *testing.T) {
	sockDir, work := t.TempDir(), t.TempDir()
	config := vhostUserSetup(t, sockDir, work, "a.sock")
	pluginDir := filepath.Join(work, "no", "such", "device-plugins")
	var stderr bytes.Buffer
	code := run([]string{"--config", config, "--plugin-dir", pluginDir, "--devinfo-dir", filepath.Join(work, "devinfo"),
		"--cdi-dir", filepath.Join(work, "cdi")}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), pluginDir) {
		t.Errorf("exit %d, want 1 naming %s:\n%s", code, pluginDir, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(work, "no")); !os.IsNotExist(err) {
		t.Errorf("a parent of --plugin-dir was created: %v", err)
	}
}

// Two resources whose socket directories are a directory and a link to it
// (or two links to one) select the same sockets: netdev-dp refuses to start.
func TestSocketDirLinksOverlap(t *testing.T) {
	sockDir, work := t.TempDir(), t.TempDir()
	vhostUserSetup(t, sockDir, work, "a.sock")
	l1, l2 := filepath.Join(work, "l1"), filepath.Join(work, "l2")
	for _, l := range []string{l1, l2} {
		if err := os.Symlink(sockDir, l); err != nil {
			t.Fatal(err)
		}
	}
	for _, dirs := range [][2]string{{sockDir, l1}, {l1, l2}} {
		config := writeConfig(t, filepath.Join(work, "overlap.json"), vhostUser("example.com/a", dirs[0]), vhostUser("example.com/b", dirs[1]))
		var stderr bytes.Buffer
		code := run([]string{"--config", config, "--plugin-dir", t.TempDir(), "--devinfo-dir", filepath.Join(work, "devinfo"),
			"--cdi-dir", filepath.Join(work, "cdi")}, io.Discard, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), "resources overlap") {
			t.Errorf("socket dirs %v: exit %d, want 1 with an overlap error:\n%s", dirs, code, stderr.String())
		}
	}
}

// netdev-dp killed (SIGKILL) after writing its CDI spec, after writing the
// device-info files, and after registering: the next start takes over what
// the killed one left, and SIGTERM then leaves nothing.
func TestKilledAtEachStep(t *testing.T) {
	tagged := filepath.Join(testenv.BuildTagged(t, "failpoints", "./cmd/netdev-dp"), "netdev-dp")
	for _, fp := range []string{"netdevdp-cdi-written", "netdevdp-devinfo-written", "deviceplugin-registered"} {
		t.Run(fp, func(t *testing.T) {
			b := newBinNode(t, "a.sock", "b.sock")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, tagged, "--config", b.config, "--plugin-dir", b.node.PluginDir(),
				"--devinfo-dir", b.devinfoDir, "--cdi-dir", b.cdiDir)
			cmd.Env = append(os.Environ(), failpoint.Env+"="+fp)
			cmd.Stderr = &stderr
			err := cmd.Run()
			st, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ctx.Err() != nil || !st.Signaled() || st.Signal() != syscall.SIGKILL {
				t.Fatalf("netdev-dp with failpoint %s: %v, want death by SIGKILL\n%s", fp, err, stderr.String())
			}
			// The killed one may have registered: once the node saw its stream break,
			// the devices it lists healthy are the next one's, which then handles SIGTERM
			// (a CI run signalled the next one while the node still listed the dead one's).
			b.waitHealthy(0, &stderr)
			again, out := b.start()
			b.waitHealthy(2, out)
			b.sigterm(again, out)
		})
	}
}
