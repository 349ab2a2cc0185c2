package phasemetrics

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
)

var add = phasespool.Record{Op: "ADD", Network: "n", Phases: []attachment.Phase{{Name: "delegate", Duration: 3 * time.Millisecond}}}

func spooled(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, phasespool.SpoolDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Without a daemon's spool a call writes nothing and makes no directory.
func TestDropWithoutSpool(t *testing.T) {
	state := t.TempDir()
	if err := phasespool.Drop(state, add); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, phasespool.SpoolDir)); !os.IsNotExist(err) {
		t.Fatalf("spool made without a daemon: %v", err)
	}
}

// Records are observed once; an unreadable one is counted and removed; one being
// written (a dot file) is left for the next drain.
func TestDrain(t *testing.T) {
	state := t.TempDir()
	c, err := NewCollector(state, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []phasespool.Record{add, add, {Op: "DEL", Network: "n", Failed: true, Phases: add.Phases}} {
		if err := phasespool.Drop(state, r); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(state, phasespool.SpoolDir)
	os.WriteFile(filepath.Join(dir, "garbage.json"), []byte("{"), 0o600)
	os.WriteFile(filepath.Join(dir, "odd.json"), []byte(`{"op":"CHECK"}`), 0o600)
	os.WriteFile(filepath.Join(dir, ".partial.json"), []byte("{"), 0o600)
	if err := c.Drain(); err != nil {
		t.Fatal(err)
	}
	if err := c.Drain(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.CollectAndCount(c.phase); got != 2 {
		t.Errorf("phase series %d, want 2 (ADD and DEL delegate)", got)
	}
	if got := testutil.ToFloat64(c.bad); got != 2 {
		t.Errorf("unreadable records %v, want 2", got)
	}
	// The node agent observes its own calls beside the spool's.
	if err := c.Observe(add, PathAgent); err != nil {
		t.Fatal(err)
	}
	if err := c.Observe(phasespool.Record{Op: "CHECK"}, PathAgent); err == nil {
		t.Error("a CHECK record observed")
	}
	counts := callCounts(t, c)
	if counts["ADD ok direct"] != 2 || counts["DEL error direct"] != 1 || counts["ADD ok agent"] != 1 || len(counts) != 3 {
		t.Errorf("call histogram counts %v, want ADD ok direct 2, DEL error direct 1, ADD ok agent 1", counts)
	}
	if names := spooled(t, state); len(names) != 1 || names[0] != ".partial.json" {
		t.Errorf("spool after drains: %v", names)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("spool after Close: %v", err)
	}
}

// callCounts is the call histogram's sample count per "op result path".
func callCounts(t *testing.T, c *Collector) map[string]uint64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.call)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["op"]+" "+l["result"]+" "+l["path"]] += m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

// A spool nobody drains stops at phasespool.MaxSpooled records.
func TestSpoolBounded(t *testing.T) {
	state := t.TempDir()
	if _, err := NewCollector(state, slog.Default()); err != nil {
		t.Fatal(err)
	}
	for range phasespool.MaxSpooled + 5 {
		if err := phasespool.Drop(state, add); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(spooled(t, state)); n != phasespool.MaxSpooled {
		t.Errorf("%d records spooled, want %d", n, phasespool.MaxSpooled)
	}
}

// A spool that is a link (someone else's directory) is refused, not written through.
func TestSpoolLinkRefused(t *testing.T) {
	state, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(state, phasespool.SpoolDir)); err != nil {
		t.Fatal(err)
	}
	if err := phasespool.Drop(state, add); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Drop through a link: %v", err)
	}
	if _, err := NewCollector(state, slog.Default()); err == nil {
		t.Error("NewCollector accepted a linked spool")
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("written through the link: %v", entries)
	}
}
