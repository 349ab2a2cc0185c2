package cdispec

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

func testDevices() []source.Device {
	return []source.Device{
		{Device: deviceplugin.Device{ID: "0000:01:00.2"}, DevNodes: []source.DevNode{{HostPath: "/dev/vfio/12", ContainerPath: "/dev/vfio/12", Permissions: "rw"}}},
		{Device: deviceplugin.Device{ID: "vhu0.sock"}, Mounts: []source.Mount{{HostPath: "/run/vhu/vhu0.sock", ContainerPath: "/run/vhu/vhu0.sock"}}},
		{Device: deviceplugin.Device{ID: "veth:odd name"}},
	}
}

func TestWriteIsAcceptedByCDICache(t *testing.T) {
	dir := t.TempDir()
	w, err := New(dir, "example.com/netdev")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(testDevices()); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(w.Path())
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("spec file %s: %v %v", w.Path(), st, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("CDI cache errors: %v", errs)
	}
	for _, d := range testDevices() {
		q := w.QualifiedName(d.ID)
		if !parser.IsQualifiedName(q) || cache.GetDevice(q) == nil {
			t.Errorf("device %q: CDI name %q not in cache (have %v)", d.ID, q, cache.ListDevices())
		}
	}
	spec, err := cdi.ReadSpec(w.Path(), 0)
	if err != nil {
		t.Fatal(err)
	}
	min, err := cdi.MinimumRequiredVersion(spec.Spec)
	if err != nil || spec.Version != min {
		t.Fatalf("cdiVersion %s, minimum %s (%v)", spec.Version, min, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left files in CDI dir: %v", entries)
	}
}

func TestRewriteAndRemove(t *testing.T) {
	dir := t.TempDir()
	w, _ := New(dir, "example.com/netdev")
	if err := w.Write(testDevices()); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(testDevices()[:1]); err != nil {
		t.Fatal(err)
	}
	spec, err := cdi.ReadSpec(w.Path(), 0)
	if err != nil || len(spec.Devices) != 1 {
		t.Fatalf("rewritten spec: %v %v", spec, err)
	}
	if err := w.Write(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spec without devices not removed: %v", err)
	}
	if err := w.Remove(); err != nil {
		t.Fatalf("Remove of a missing file: %v", err)
	}
}

func TestInvalidSpecIsNotWritten(t *testing.T) {
	dir := t.TempDir()
	w, _ := New(dir, "example.com/netdev")
	bad := []source.Device{{Device: deviceplugin.Device{ID: "x"}, DevNodes: []source.DevNode{{ContainerPath: "/dev/x", Permissions: "rwz"}}}}
	if err := w.Write(bad); err == nil {
		t.Fatal("invalid permissions accepted")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files left after a refused write: %v", entries)
	}
}

func TestNewRejectsBadKind(t *testing.T) {
	for _, res := range []string{"nodomain", "example.com/", "bad_vendor!/x"} {
		if _, err := New(t.TempDir(), res); err == nil {
			t.Errorf("resource %q accepted as CDI kind", res)
		}
	}
}

func TestDeviceName(t *testing.T) {
	cases := map[string]string{
		"veth0":        "veth0",
		"0000:01:00.2": "0000:01:00.2",
	}
	for id, want := range cases {
		if got := DeviceName(id); got != want {
			t.Errorf("DeviceName(%q) = %q, want %q", id, got, want)
		}
	}
	a, b := DeviceName("a:b"), DeviceName("a-b")
	if a == b || parser.ValidateDeviceName(a) != nil {
		t.Errorf("a:b -> %q, a-b -> %q", a, b)
	}
	if n := DeviceName("::"); parser.ValidateDeviceName(n) != nil {
		t.Errorf("DeviceName(::) = %q invalid", n)
	}
	if got := EnvName("example.com/netdev", "veth0"); got != "CDI_EXAMPLE_COM_NETDEV_VETH0" {
		t.Errorf("EnvName = %q", got)
	}
}

// A FIFO, or a link to /dev/zero, left at the spec's path neither blocks
// Write nor is followed: the spec is written over it.
func TestWriteOverHostileFile(t *testing.T) {
	for _, mk := range []func(string) error{
		func(p string) error { return syscall.Mkfifo(p, 0o644) },
		func(p string) error { return os.Symlink("/dev/zero", p) },
	} {
		dir := t.TempDir()
		w, err := New(dir, "example.com/net")
		if err != nil {
			t.Fatal(err)
		}
		if err := mk(w.Path()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		done := make(chan error, 1)
		go func() {
			done <- w.Write([]source.Device{{Device: deviceplugin.Device{ID: "d0", Healthy: true, NUMANode: deviceplugin.NoNUMA}}})
		}()
		select {
		case err := <-done:
			st, serr := os.Lstat(w.Path())
			if err != nil || serr != nil || !st.Mode().IsRegular() {
				t.Errorf("Write over a hostile file: %v, %v %v", err, st, serr)
			}
		case <-ctx.Done():
			t.Fatal("Write did not return")
		}
		cancel()
	}
}
