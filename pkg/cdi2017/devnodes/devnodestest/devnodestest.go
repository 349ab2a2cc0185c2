// Package devnodestest makes device nodes and cdi-devnodes configs for
// tests, in temp dirs, so that nothing on the host's /dev is touched.
package devnodestest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Major is the major number of the nodes: one for local/experimental use
// (240-254), so the nodes lead to no driver and opening one fails.
const Major = 240

// Nodes are character device nodes tty1..ttyN (minor = N) in a temp dir.
type Nodes struct {
	Dir string
}

// New creates n nodes.
func New(t testing.TB, n int) Nodes {
	t.Helper()
	nodes := Nodes{Dir: t.TempDir()}
	for i := 1; i <= n; i++ {
		if err := unix.Mknod(nodes.Dev(i), unix.S_IFCHR|0o600, int(unix.Mkdev(Major, uint32(i)))); err != nil {
			t.Fatalf("mknod %s: %v", nodes.Dev(i), err)
		}
	}
	return nodes
}

// Dev is the path of node ttyI.
func (n Nodes) Dev(i int) string { return filepath.Join(n.Dir, fmt.Sprintf("tty%d", i)) }

// Devs are the paths of nodes ttyFrom..ttyTo.
func (n Nodes) Devs(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, n.Dev(i))
	}
	return out
}

// Config is a cdi-devnodes config (cdiVersion 0.0.1, type tty) for the
// nodes, reserving the first reserved, with its state in stateDir and
// sysfs (for NUMA nodes) at sysfs.
func (n Nodes) Config(reserved int, stateDir, sysfs string) []byte {
	conf, err := json.MarshalIndent(map[string]any{"cdiVersion": "0.0.1", "name": "test TTYs", "type": "tty", "plugin": "cdi-devnodes",
		"args": map[string]any{"glob": filepath.Join(n.Dir, "tty*"), "num_system_reserved": reserved,
			"state_dir": stateDir, "sysfs_root": sysfs}}, "", "  ")
	if err != nil {
		panic(err)
	}
	return conf
}

// WriteConfig writes conf as confDir/tty.d/devnodes.conf and returns its path.
func WriteConfig(t testing.TB, confDir string, conf []byte) string {
	t.Helper()
	path := filepath.Join(confDir, "tty.d", "devnodes.conf")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// SetNUMA gives node ttyI a NUMA node in a fake sysfs at sysfs.
func SetNUMA(t testing.TB, sysfs string, i, numa int) {
	t.Helper()
	dir := filepath.Join(sysfs, "dev", "char", fmt.Sprintf("%d:%d", Major, i), "device")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(fmt.Sprintf("%d\n", numa)), 0o644); err != nil {
		t.Fatal(err)
	}
}
