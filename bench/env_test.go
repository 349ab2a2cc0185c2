package bench

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestCloseForgetsCnitoolResults: an ADD through cnitool whose DEL never ran (a step that
// failed mid-cycle) leaves cnitool's cache entry for the env's netns; closing the env
// removes it, and only it.
func TestCloseForgetsCnitoolResults(t *testing.T) {
	defer removeIfCreated(testenv.CnitoolResults, filepath.Dir(testenv.CnitoolResults))()
	cfg := Config{Devplumb: filepath.Join(testenv.Build(t, "./cmd/devplumb"), "devplumb"), CNIBin: testenv.CNIPlugins(t)}
	e, err := newEnv(cfg, podresourcesserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			e.close()
		}
	}()
	other := filepath.Join(testenv.CnitoolResults, "bench-forget-cnitool-0011223344556677889a-net1")
	if err := os.MkdirAll(testenv.CnitoolResults, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(other)
	conf := map[string]any{"cniVersion": "1.0.0", "name": "bench-forget", "type": "bridge", "bridge": bridgeName,
		"ipam": map[string]any{"type": "host-local", "subnet": "10.99.7.0/24", "dataDir": filepath.Join(e.dir, "ipam")}}
	if err := e.writeNet(conf); err != nil {
		t.Fatal(err)
	}
	netns, err := e.newNetns()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cnitool("add", "bench-forget", netns, "net1", "pod-0"); err != nil {
		t.Fatal(err)
	}
	left := func() []string {
		m, _ := filepath.Glob(filepath.Join(testenv.CnitoolResults, "bench-forget-cnitool-*"))
		return m
	}
	if got := left(); len(got) != 2 {
		t.Fatalf("after the ADD, cnitool's cache holds %v, want its entry and the other", got)
	}
	e.close()
	closed = true
	if got := left(); len(got) != 1 || got[0] != other {
		t.Errorf("after close, cnitool's cache holds %v, want only %s", got, other)
	}
}
