package atomicfile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A temp file a killed writer left is listed once old enough; a fresh one
// (a live writer's), the written file, others' hidden files and a
// directory of a temp file's name are not.
func TestStaleTemps(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * TempAge)
	deadWriters := []string{".rec.json.tmp-12345", tempName("other.json")}
	stay := []string{"rec.json", ".rec.json.tmp-777", ".rec.json.tmp-12x", ".hidden", "visible.tmp-1", ".dir.tmp-1"}
	for _, name := range append(slices.Clone(deadWriters), stay...) {
		p := filepath.Join(dir, name)
		mtime := old
		var err error
		switch name {
		case ".rec.json.tmp-777":
			mtime = time.Now() // a live writer's
			err = os.WriteFile(p, []byte("x"), 0o600)
		case ".dir.tmp-1":
			err = os.Mkdir(p, 0o700)
		default:
			err = os.WriteFile(p, []byte("x"), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := StaleTemps(dir, TempAge)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, name := range deadWriters {
		want = append(want, filepath.Join(dir, name))
	}
	slices.Sort(stale)
	slices.Sort(want)
	if !slices.Equal(stale, want) {
		t.Fatalf("stale %q, want the dead writers' temp files %q", stale, want)
	}
	if got, err := StaleTemps(filepath.Join(dir, "missing"), 0); got != nil || err != nil {
		t.Errorf("missing dir: %q, %v; want nothing", got, err)
	}
}

// A process killed between its create and its rename leaves exactly the
// name IsTempName knows.
func TestIsTempName(t *testing.T) {
	for name, want := range map[string]bool{
		tempName("a.json"): true, tempName(string(make([]byte, 300))): true,
		".a.tmp-1": true, ".a.tmp-": false, "a.tmp-1": false, ".a.tmp-1x": false, ".tmp-1": false,
	} {
		if got := IsTempName(name); got != want {
			t.Errorf("IsTempName(%q) = %v, want %v", name, got, want)
		}
	}
}
