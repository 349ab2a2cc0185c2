package protocol

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"
)

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

const cdiSpec = `{"cdiVersion": "0.5.0", "kind": "example.com/tty",
  "devices": [{"name": "one", "containerEdits": {"deviceNodes": [{"path": "/dev/tty5"}]}}]}`

// TestEtcCDISharedWithCDILibrary: /etc/cdi holds today's CDI spec files and
// the draft's config folders. The CDI library's cache reads its spec and
// nothing of ours, without errors; Discover reads our configs and no spec.
func TestEtcCDISharedWithCDILibrary(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "example.com-tty.json"), cdiSpec)
	writeFile(t, filepath.Join(dir, "tty.d", "generic.conf"), ttyConf)
	writeFile(t, filepath.Join(dir, "gpu.d", "drm.conf"), drmConf)
	writeFile(t, filepath.Join(dir, "gpu.d", "stray.json"), cdiSpec) // not a .conf: not ours, and in a folder: not the library's
	writeFile(t, filepath.Join(dir, "notes.txt"), "hello")

	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("CDI cache: %v", err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Errorf("CDI cache errors: %v", errs)
	}
	if devs := cache.ListDevices(); !reflect.DeepEqual(devs, []string{"example.com/tty=one"}) {
		t.Errorf("CDI cache devices %v, want only the spec's", devs)
	}

	found, err := Discover(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		rel, _ := filepath.Rel(dir, f.Path)
		got = append(got, rel+"="+f.Config.Type)
	}
	if want := []string{"gpu.d/drm.conf=gpu", "tty.d/generic.conf=tty"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Discover found %v, want %v", got, want)
	}
	if string(found[1].Raw) != ttyConf {
		t.Errorf("raw config %q", found[1].Raw)
	}
}

func TestConfigInWrongFolder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "gpu.d", "tty.conf"), ttyConf)
	_, err := Discover(dir)
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrCodeResourceSpec {
		t.Errorf("tty config in gpu.d: %v, want error 4", err)
	}
	if _, err := LoadConfigFile(filepath.Join(dir, "gpu.d", "tty.conf")); !errors.As(err, &e) {
		t.Errorf("LoadConfigFile: %v", err)
	}
}

func TestDiscoverErrors(t *testing.T) {
	if found, err := Discover(filepath.Join(t.TempDir(), "none")); err != nil || found != nil {
		t.Errorf("missing dir: %v %v", found, err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "my-gpu.d", "x.conf"), drmConf)
	if _, err := Discover(dir); err == nil {
		t.Error("folder my-gpu.d (no resource-type) accepted")
	}
	dir = t.TempDir()
	writeFile(t, filepath.Join(dir, "tty.d", "x.conf"), "{")
	if _, err := Discover(dir); err == nil {
		t.Error("broken config accepted")
	}
}

func TestFindBinary(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "noexec"), "")
	os.WriteFile(filepath.Join(dir, "ok"), nil, 0o755)
	if p, err := FindBinary(dir, "ok"); err != nil || p != filepath.Join(dir, "ok") {
		t.Errorf("ok: %v %v", p, err)
	}
	for _, bad := range []string{"noexec", "missing", "../ok", ""} {
		if _, err := FindBinary(dir, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
