package nodestate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
)

// gc keeps the stale attachment of a newer devplumb's record and says why, naming the
// file and the version; its record and CNI file stay.
func TestGCKeepsNewerRecord(t *testing.T) {
	n := newNode(t)
	cni := n.attach(t, "gone", "c1", "net1", "veth1")
	file := filepath.Join(n.paths.StateDir, "attachments", "net:c1:net1.json")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m["version"] = attachment.FormatVersion + 1
	data, _ = json.Marshal(m)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	acts, err := GC(context.Background(), n.paths, GCOptions{})
	if err != nil || len(acts) != 1 || acts[0].Verb != "keep" || !strings.Contains(acts[0].Why, file) ||
		!strings.Contains(acts[0].Why, "format version 2") {
		t.Fatalf("gc of a newer record: %+v %v, want it kept naming %s and version 2", acts, err, file)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the newer record: %v", err)
	}
	if _, err := os.Stat(cni); err != nil {
		t.Errorf("the newer record's CNI file: %v", err)
	}
}
