package safefile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// Each way a path can lead elsewhere is refused: the directory is a link,
// it or a parent is writable by others or belongs to another user, or it
// is not a directory. Root's links above it and sticky parents are fine.
func TestCheckDir(t *testing.T) {
	base := t.TempDir() // under /tmp: sticky and world-writable
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := mk("good", 0o755)
	link := filepath.Join(base, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	groupW := mk("groupw", 0o775)
	foreign := mk("foreign", 0o755)
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	unsafe := []string{link, groupW, mk("groupw/sub", 0o700), foreign, mk("foreign/sub", 0o700),
		mk("sticky", 0o777|os.ModeSticky), file, "relative/dir"}
	for _, d := range unsafe {
		if err := CheckDir(d); !errors.Is(err, ErrUnsafeDir) {
			t.Errorf("CheckDir(%s) = %v, want ErrUnsafeDir", d, err)
		}
		if err := EnsureDir(filepath.Join(d, "new"), 0o700); err == nil && d != link && d != filepath.Join(base, "sticky") {
			t.Errorf("EnsureDir below %s succeeded", d)
		}
	}
	for _, d := range []string{good, mk("good/sub", 0o700), filepath.Join(link, "sub"), mk("sticky/sub", 0o700)} {
		if err := CheckDir(d); err != nil {
			t.Errorf("CheckDir(%s): %v", d, err)
		}
	}
	if err := CheckDir(filepath.Join(base, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	made := filepath.Join(base, "made", "deep")
	if err := EnsureDir(made, 0o755); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(made); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("EnsureDir made %v %v", st, err)
	}
}

// Below an owned root no directory may be a link, not even root's own.
func TestDirUnder(t *testing.T) {
	root, target := t.TempDir(), t.TempDir()
	if err := os.Symlink(target, filepath.Join(root, "libcni")); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"libcni", "libcni/net", "../x"} {
		if _, err := EnsureDirUnder(root, rel, 0o700); !errors.Is(err, ErrUnsafeDir) {
			t.Errorf("EnsureDirUnder(%s): %v", rel, err)
		}
		if _, err := CheckDirUnder(root, rel); !errors.Is(err, ErrUnsafeDir) {
			t.Errorf("CheckDirUnder(%s): %v", rel, err)
		}
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("created in the link's target: %v", ents)
	}
	dir, err := EnsureDirUnder(filepath.Join(root, "new"), "a/b", 0o700)
	if err != nil || dir != filepath.Join(root, "new", "a", "b") {
		t.Fatalf("EnsureDirUnder: %s %v", dir, err)
	}
	if _, err := CheckDirUnder(root, "missing/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// A Root is checked once: below it, only rel's directories are, each as
// CheckDirUnder checks them (no link, not writable by others); the zero
// Root refuses everything.
func TestRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "state")
	r, err := EnsureRoot(root, 0o700)
	if err != nil || r.Dir() != root {
		t.Fatalf("EnsureRoot: %+v %v", r, err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.EnsureDir("link/x", 0o700); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("EnsureDir below a link: %v", err)
	}
	if _, err := r.CheckDir("../x"); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("CheckDir of ../x: %v", err)
	}
	// Once checked, the root is not checked again: a root made unsafe after
	// its check (by root) is what a later check, a new call's, finds.
	if err := os.Chmod(root, 0o777); err != nil {
		t.Fatal(err)
	}
	if dir, err := r.EnsureDir("a/b", 0o700); err != nil || dir != filepath.Join(root, "a", "b") {
		t.Errorf("EnsureDir below the checked root: %s %v", dir, err)
	}
	if _, err := CheckRoot(root); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("CheckRoot of a root others can write: %v", err)
	}
	if _, err := CheckDirUnder(root, "a"); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("CheckDirUnder a root others can write: %v", err)
	}
	if _, err := (Root{}).CheckDir("a"); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("the zero Root: %v", err)
	}
}

// A file or socket is trusted only when root's, not writable by others
// (sockets excepted: their mode only says who may connect), in a checked
// directory.
func TestCheckOwnedFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode, owner int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{write("ok", 0o600, 0), sock} {
		if err := CheckOwnedFile(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range []string{write("writable", 0o666, 0), write("foreign", 0o600, 65534)} {
		if err := CheckOwnedFile(p); !errors.Is(err, ErrUnsafeDir) {
			t.Errorf("%s: %v", p, err)
		}
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil || os.Chmod(open, 0o777) != nil {
		t.Fatal(err)
	}
	inOpen := filepath.Join(open, "f")
	if err := os.WriteFile(inOpen, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckOwnedFile(inOpen); !errors.Is(err, ErrUnsafeDir) {
		t.Errorf("file in a world-writable dir: %v", err)
	}
}
