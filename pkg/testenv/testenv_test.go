package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCNIPluginsBuildAndRun(t *testing.T) {
	dir := CNIPlugins(t)
	for _, name := range []string{"host-device", "macvlan", "bridge", "host-local", "static", "cnitool"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s not built: %v", name, err)
		}
	}
	// A CNI plugin answers VERSION with the versions it supports.
	cmd := exec.Command(filepath.Join(dir, "host-device"))
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("host-device VERSION: %v", err)
	}
	if !strings.Contains(string(out), "supportedVersions") {
		t.Errorf("unexpected VERSION output: %s", out)
	}
}

// The entry point is built with devplumb-direct beside it, tagged alike: without an
// agent it execs its sibling, as installed.
func TestBuildEntryPointBringsDirect(t *testing.T) {
	t.Setenv("DEVPLUMB_TESTBIN", t.TempDir()) // nothing built there before
	for _, tags := range []string{"", "failpoints"} {
		dir := BuildTagged(t, tags, "./cmd/devplumb")
		for _, name := range []string{"devplumb", "devplumb-direct"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Errorf("tags %q: %s not built beside the entry point: %v", tags, name, err)
			}
		}
	}
}

func TestBuildReportsFailure(t *testing.T) {
	ft := &fakeT{TB: t}
	func() {
		defer func() { recover() }()
		Build(ft, "./pkg/does-not-exist")
	}()
	if !ft.failed {
		t.Fatal("Build of a missing package did not fail the test")
	}
}

func TestBinDirPerCheckout(t *testing.T) {
	a, b := binDirFor(0, "/work/a"), binDirFor(0, "/work/b")
	if a == b || binDirFor(1, "/work/a") == a || binDirFor(0, "/work/a") != a {
		t.Errorf("bin dirs: %s %s", a, b)
	}
}

type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Fatal(args ...any) { f.failed = true; panic("fatal") }
func (f *fakeT) Helper()           {}
