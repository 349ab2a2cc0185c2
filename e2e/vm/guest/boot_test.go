//go:build vmguest

package guest

import (
	"os"
	"path/filepath"
	"testing"
)

// The guest sees both igb PFs, each on its own NUMA node.
func TestPFsOnTwoNUMANodes(t *testing.T) {
	pfs, _ := filepath.Glob("/sys/bus/pci/drivers/igb/0000:*")
	if len(pfs) != 2 {
		t.Fatalf("igb PFs: %v", pfs)
	}
	nodes := map[string]bool{}
	for _, pf := range pfs {
		n, err := os.ReadFile(filepath.Join(pf, "numa_node"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s numa_node %s", filepath.Base(pf), n)
		nodes[string(n)] = true
	}
	if len(nodes) != 2 {
		t.Errorf("PFs share a NUMA node: %v", nodes)
	}
}
