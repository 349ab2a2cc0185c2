package devnodes

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cdi2017/devnodes/devnodestest"
	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// fixture is device nodes tty1..ttyN of our own, a sysfs root, a state
// dir and a config in a tty.d folder, and the built binary.
type fixture struct {
	t                  *testing.T
	bin, sysfs, states string
	nodes              devnodestest.Nodes
	conf               []byte
	caller             *protocol.Binary
}

func newFixture(t *testing.T, nodes, reserved int) *fixture {
	t.Helper()
	f := &fixture{t: t, bin: filepath.Join(testenv.Build(t, "./cmd/cdi-devnodes"), "cdi-devnodes"),
		nodes: devnodestest.New(t, nodes), sysfs: t.TempDir(), states: t.TempDir()}
	// Not a device node: never handed out.
	os.WriteFile(filepath.Join(f.nodes.Dir, "ttyfile"), nil, 0o644)
	f.conf = f.nodes.Config(reserved, f.states, f.sysfs)
	devnodestest.WriteConfig(t, t.TempDir(), f.conf)
	f.caller = &protocol.Binary{Path: f.bin, Config: f.conf, Type: "tty"}
	return f
}

// dev is the path of test node ttyN.
func (f *fixture) dev(n int) string { return f.nodes.Dev(n) }

// setNUMA gives test node ttyN a NUMA node in the fake sysfs.
func (f *fixture) setNUMA(n, numa int) { devnodestest.SetNUMA(f.t, f.sysfs, n, numa) }

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
