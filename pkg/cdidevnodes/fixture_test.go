package cdidevnodes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cdibin"
	"github.com/devplumb/devplumb/pkg/testenv"
	"golang.org/x/sys/unix"
)

// testMajor is a device major number for local/experimental use (240-254):
// the nodes the tests create lead to no driver, so nothing on the host is
// ever opened through them.
const testMajor = 240

// fixture is a temp dir of device nodes tty1..ttyN, a sysfs root, a state
// dir and a config in a tty.d folder, and the built binary.
type fixture struct {
	t                          *testing.T
	bin, devDir, sysfs, states string
	confPath                   string
	conf                       []byte
	caller                     *cdibin.Binary
}

func newFixture(t *testing.T, nodes, reserved int) *fixture {
	t.Helper()
	f := &fixture{t: t, bin: filepath.Join(testenv.Build(t, "./cmd/cdi-devnodes"), "cdi-devnodes"),
		devDir: t.TempDir(), sysfs: t.TempDir(), states: t.TempDir()}
	for i := 1; i <= nodes; i++ {
		if err := unix.Mknod(filepath.Join(f.devDir, fmt.Sprintf("tty%d", i)), unix.S_IFCHR|0o600, int(unix.Mkdev(testMajor, uint32(i)))); err != nil {
			t.Fatalf("mknod: %v", err)
		}
	}
	// Not a device node: never handed out.
	os.WriteFile(filepath.Join(f.devDir, "ttyfile"), nil, 0o644)
	conf, err := json.MarshalIndent(map[string]any{"cdiVersion": "0.0.1", "name": "TTYs", "type": "tty", "plugin": "cdi-devnodes",
		"args": map[string]any{"num_system_reserved": reserved, "glob": filepath.Join(f.devDir, "tty*"),
			"state_dir": f.states, "sysfs_root": f.sysfs}}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	f.conf = conf
	f.confPath = filepath.Join(t.TempDir(), "tty.d", "generic.conf")
	os.MkdirAll(filepath.Dir(f.confPath), 0o755)
	if err := os.WriteFile(f.confPath, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	f.caller = &cdibin.Binary{Path: f.bin, Config: conf, Type: "tty"}
	return f
}

// dev is the path of test node ttyN.
func (f *fixture) dev(n int) string { return filepath.Join(f.devDir, fmt.Sprintf("tty%d", n)) }

// setNUMA gives test node ttyN a NUMA node in the fake sysfs.
func (f *fixture) setNUMA(n, numa int) {
	dir := filepath.Join(f.sysfs, "dev", "char", fmt.Sprintf("%d:%d", testMajor, n), "device")
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(fmt.Sprintf("%d\n", numa)), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// run runs the binary as env(1) would: "K=V ..." words, the config on stdin.
func (f *fixture) run(envWords string) (string, int) {
	f.t.Helper()
	cmd := exec.Command(f.bin)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, strings.Fields(envWords)...)
	cmd.Stdin = bytes.NewReader(f.conf)
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		f.t.Fatal(err)
	}
	return out.String(), code
}

func (f *fixture) info() int64 {
	f.t.Helper()
	avail, err := f.caller.Info(context.Background(), "0.0.1")
	if err != nil {
		f.t.Fatalf("INFO: %v", err)
	}
	return avail["tty"]
}

func (f *fixture) stateBytes() []byte {
	data, _ := os.ReadFile(StatePath(f.states, "tty"))
	return data
}

func (f *fixture) state() *State {
	f.t.Helper()
	st, err := ReadState(f.states, "tty")
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

// jsonEq compares JSON texts as values.
func jsonEq(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("output %q: %v", got, err)
	}
	json.Unmarshal([]byte(want), &w)
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Errorf("output\n got %s\nwant %s", gb, wb)
	}
}
