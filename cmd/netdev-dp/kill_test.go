package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRestartAfterSIGKILL: a netdev-dp killed with SIGKILL leaves its
// socket, device-info files and CDI spec. The next start replaces the stale
// socket, removes the file of the device that went away meanwhile, keeps the
// file of the device that is still there, and SIGTERM then leaves nothing.
func TestRestartAfterSIGKILL(t *testing.T) {
	b := newBinNode(t, "a.sock", "b.sock")
	first, stderr := b.start()
	b.waitDevices(2, stderr)
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	if _, err := b.store.ReadDP("example.com/vhu", "b.sock"); err != nil {
		t.Fatalf("SIGKILL should leave the files behind: %v", err)
	}
	// b.sock goes away while netdev-dp is dead: a vswitch port deleted.
	if err := os.Remove(filepath.Join(b.sockDir, "b.sock")); err != nil {
		t.Fatal(err)
	}

	second, stderr := b.start()
	b.waitDevices(1, stderr)
	if _, err := b.store.ReadDP("example.com/vhu", "b.sock"); err == nil {
		t.Errorf("file of the device that went away kept after restart\n%s", stderr.String())
	}
	if _, err := b.store.ReadDP("example.com/vhu", "a.sock"); err != nil {
		t.Errorf("file of the device still there: %v", err)
	}
	b.sigterm(second, stderr)
}
