package plugin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An attachment a newer devplumb recorded (a downgrade): DEL succeeds and leaves it
// alone, GC refuses it naming the file and the version (and tells the delegates' GC it
// is valid), and a retried ADD is refused.
func TestNewerRecordIsLeftAlone(t *testing.T) {
	e := newExecEnv(t, "0000:01:00.1")
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) }); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(e.root, "state", "attachments", "fast-net:c1:net1.json")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil || m["version"] != float64(1) {
		t.Fatalf("record %s: version %v (%v), want 1", file, m["version"], err)
	}
	m["version"] = 7
	data, _ = json.Marshal(m)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	names := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), file) && strings.Contains(err.Error(), "format version 7")
	}

	if err := e.p.Del(e.args("net1")); err != nil {
		t.Fatalf("DEL of a newer record: %v, want success", err)
	}
	e.conf["cniVersion"] = "1.1.0"
	e.conf["cni.dev/valid-attachments"] = []map[string]string{}
	if err := e.p.GC(e.args("")); !names(err) {
		t.Errorf("GC of a newer record: %v, want refused naming %s and version 7", err, file)
	}
	if _, err := captureStdout(t, func() error { return e.p.Add(e.args("net1")) }); !names(err) {
		t.Errorf("ADD over a newer record: %v, want refused naming %s and version 7", err, file)
	}
	if calls := e.del.called(); !slices.Equal(calls, []string{"ADD net1", "GC"}) {
		t.Errorf("delegate calls %v, want its ADD and the delegate GC alone", calls)
	}
	e.del.mu.Lock()
	gc := string(e.del.stdin["GC"])
	e.del.mu.Unlock()
	if !strings.Contains(gc, `"containerID":"c1"`) {
		t.Errorf("the delegate GC was not told the newer attachment is valid: %s", gc)
	}
	if after, err := os.ReadFile(file); err != nil || string(after) != string(data) {
		t.Errorf("the newer record changed: %s (%v)", after, err)
	}
}
