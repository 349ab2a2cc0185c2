package atomicfile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestWriteFileCreatesDirsAndMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "f.json")
	if err := WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, want 0644", st.Mode().Perm())
	}
	dst, _ := os.Stat(filepath.Dir(path))
	if dst.Mode().Perm() != 0o755 {
		t.Errorf("dir mode = %v, want 0755", dst.Mode().Perm())
	}
}

func TestWriteFileOverwritesAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, s := range []string{"first", "second"} {
		if err := WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(path)
	if string(got) != "second" {
		t.Errorf("content = %q", got)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory has %d entries, want 1 (temp file left?)", len(ents))
	}
}

func TestWriteFileFailsCleanly(t *testing.T) {
	dir := t.TempDir()
	// A directory where the file should be: rename fails, temp must go.
	path := filepath.Join(dir, "f")
	if err := os.MkdirAll(filepath.Join(path, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("x"), 0o644); err == nil {
		t.Fatal("expected error writing over a non-empty directory")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("temp file left behind: %v", ents)
	}
}

func TestConcurrentWritersNeverMix(t *testing.T) {
	t.Run("durable", func(t *testing.T) { concurrentWriters(t, WriteFile) })
	t.Run("volatile", func(t *testing.T) { concurrentWriters(t, WriteFileVolatile) })
}

// concurrentWriters has eight writers replace one file with write while a
// reader checks every version it reads is one writer's whole content; no
// temp file is left.
func concurrentWriters(t *testing.T, write func(string, []byte, os.FileMode) error) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	var wg sync.WaitGroup
	contents := make([][]byte, 8)
	for i := range contents {
		contents[i] = bytes.Repeat([]byte(fmt.Sprint(i)), 64<<10)
	}
	stop := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				close(errs)
				return
			default:
			}
			got, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			if !validContent(got, contents) {
				errs <- fmt.Errorf("reader saw a partial or mixed file of %d bytes", len(got))
				close(errs)
				return
			}
		}
	}()
	for i := range contents {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for range 20 {
				if err := write(path, contents[i], 0o644); err != nil {
					t.Error(err)
				}
			}
		}(i)
	}
	wg.Wait()
	close(stop)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !validContent(got, contents) {
		t.Fatal("final file is not one writer's content")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}

func validContent(got []byte, all [][]byte) bool {
	for _, c := range all {
		if bytes.Equal(got, c) {
			return true
		}
	}
	return false
}

// A file name at the 255-byte limit is written too: the temp name must not
// be longer than the file's.
func TestWriteFileLongestName(t *testing.T) {
	path := filepath.Join(t.TempDir(), strings.Repeat("n", 255))
	if err := WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "x" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

// Directories are 0755 even under a restrictive umask; existing ones keep
// their mode.
func TestWriteFileDirModeIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(base, "dp", "sub", "f.json")
	if err := WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(base, "dp"), filepath.Dir(path)} {
		if st, _ := os.Stat(d); st.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v, want 0755", d, st.Mode().Perm())
		}
	}
	if st, _ := os.Stat(base); st.Mode().Perm() != 0o711 {
		t.Errorf("existing dir changed to %v", st.Mode().Perm())
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("file mode %v, want 0644", st.Mode().Perm())
	}
}

func TestWriteFileParentIsAFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dp"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(filepath.Join(dir, "dp", "f"), []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), "a file of that name exists") {
		t.Fatalf("want an error naming the file in the way, got %v", err)
	}
}

// The volatile variant replaces a file the same way (mode, parents, no temp left
// behind); only durability across a power loss differs, which no test can observe.
func TestWriteFileVolatileReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "rec.json")
	for _, s := range []string{"first", "second"} {
		if err := WriteFileVolatile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "second" {
		t.Fatalf("content %q, %v", got, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
	if err := WriteFileVolatile(filepath.Join(path, "under-a-file"), nil, 0o600); err == nil {
		t.Error("writing below a file succeeded")
	}
}

// A volatile write replaces what is in the way as a rename does: a link
// itself (never what it points to), and not a directory, which fails it with
// nothing left behind.
func TestWriteFileVolatileReplacesNoMore(t *testing.T) {
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	if err := os.WriteFile(target, []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileVolatile(link, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(link)
	got, _ := os.ReadFile(link)
	kept, _ := os.ReadFile(target)
	if err != nil || !st.Mode().IsRegular() || string(got) != "new" || string(kept) != "kept" {
		t.Errorf("link replaced by %v (%v) holding %q; its target holds %q, want \"kept\"", st.Mode(), err, got, kept)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.MkdirAll(filepath.Join(sub, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileVolatile(sub, []byte("x"), 0o600); err == nil {
		t.Error("a volatile write over a directory succeeded")
	}
	if st, err := os.Stat(filepath.Join(sub, "in")); err != nil || !st.IsDir() {
		t.Errorf("the directory in the way changed: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("left behind: %v", ents)
	}
}
