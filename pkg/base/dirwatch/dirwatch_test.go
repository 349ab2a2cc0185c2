package dirwatch

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// next returns the next change that is not Ignored, with its event name.
func next(t *testing.T, w *Watcher) (Change, string) {
	t.Helper()
	for {
		select {
		case ev := <-w.Events:
			c, err := w.Handle(ev)
			if err != nil {
				t.Fatal(err)
			}
			if c != Ignored {
				return c, ev.Name
			}
		case err := <-w.Errors:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
	}
}

// nextChange skips InDir events until a Gone or Back.
func nextChange(t *testing.T, w *Watcher) Change {
	t.Helper()
	for {
		if c, _ := next(t, w); c != InDir {
			return c
		}
	}
}

// TestRecreatedDirIsWatchedAgain: after the directory and its parent are
// removed and created again, events inside it arrive again.
func TestRecreatedDirIsWatchedAgain(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, name := next(t, w); c != InDir || name != filepath.Join(dir, "f") {
		t.Fatalf("got %v %s, want InDir f", c, name)
	}
	if err := os.RemoveAll(filepath.Join(root, "a")); err != nil {
		t.Fatal(err)
	}
	if c := nextChange(t, w); c != Gone {
		t.Fatalf("got %v, want Gone", c)
	}
	if !w.Missing() {
		t.Fatal("Missing false after Gone")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if c := nextChange(t, w); c != Back {
		t.Fatalf("got %v, want Back", c)
	}
	if err := os.WriteFile(filepath.Join(dir, "g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, name := next(t, w); c != InDir || name != filepath.Join(dir, "g") {
		t.Fatalf("after recreation got %v %s, want InDir g", c, name)
	}
}

// TestOtherEventsWhileMissing: unrelated creations in the ancestor do not
// count as the directory coming back.
func TestOtherEventsWhileMissing(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if c := nextChange(t, w); c != Gone {
		t.Fatalf("got %v, want Gone", c)
	}
	// A file named like the directory is not the directory.
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "other"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if c := nextChange(t, w); c != Back {
		t.Fatalf("got %v, want Back", c)
	}
}
