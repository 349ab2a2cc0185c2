package unixsock

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListensOnceItExists: a client that finds the socket file can connect;
// the file never exists bound but not listening, as it does between a bind
// and its listen. A poller dials the moment the file appears, over many
// listens (net.Listen fails this within a few hundred).
func TestListensOnceItExists(t *testing.T) {
	path := filepath.Join(shortDir(t), "s.sock")
	for i := range 300 {
		refused := make(chan error, 1)
		stop := make(chan struct{})
		go func() { refused <- dialWhenThere(path, stop) }()
		l, err := Listen(path, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		close(stop)
		if err := <-refused; err != nil {
			t.Fatalf("listen %d: the socket existed and refused: %v", i, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Fatalf("listen %d: the socket stays after Close: %v", i, err)
		}
	}
}

// dialWhenThere polls for path until stop and dials it once it exists.
func dialWhenThere(path string, stop <-chan struct{}) error {
	for {
		if _, err := os.Lstat(path); err == nil {
			c, err := net.Dial("unix", path)
			if err != nil {
				return err
			}
			return c.Close()
		}
		select {
		case <-stop:
			return nil
		default:
		}
	}
}

// TestModeAndNothingLeft: the socket has its mode whatever the umask, no
// temporary file stays beside it, and a second Close leaves a socket that
// took the path since alone.
func TestModeAndNothingLeft(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "s.sock")
	l, err := Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(path)
	if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v: want a socket of mode 0600", st, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d files, want the socket alone", len(entries))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := Listen(path, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if err := l.Close(); err == nil {
		t.Error("a second Close succeeded")
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Errorf("the next listener's socket after the first's second Close: %v", err)
	} else {
		c.Close()
	}
}

// TestBadPath: a directory that does not exist, or a file at the path that
// is not a socket, is an error naming the path; the file stays as it was.
func TestBadPath(t *testing.T) {
	dir := shortDir(t)
	path := filepath.Join(dir, "none", "s.sock")
	if _, err := Listen(path, 0o600); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Listen in a missing directory: %v, want an error naming %s", err, path)
	}
	file := filepath.Join(dir, "f.sock")
	if err := os.WriteFile(file, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file, 0o600); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("Listen on a regular file: %v, want an error naming %s", err, file)
	}
	if data, err := os.ReadFile(file); err != nil || string(data) != "mine" {
		t.Errorf("the regular file after Listen: %q %v, want it as it was", data, err)
	}
}

// shortDir is a temporary directory short enough for socket paths.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "us")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestLongPath: a path too long for the named temporary still listens, by
// the short one; the bound name, which a connection's peer address keeps,
// names the socket when it fits.
func TestLongPath(t *testing.T) {
	dir := shortDir(t)
	for _, base := range []string{"s.sock", strings.Repeat("s", maxPath-len(dir)-1)} {
		path := filepath.Join(dir, base)
		l, err := Listen(path, 0o600)
		if err != nil {
			t.Fatalf("%d-byte path: %v", len(path), err)
		}
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("%d-byte path: %v", len(path), err)
		}
		bound := c.RemoteAddr().String()
		c.Close()
		l.Close()
		if named := strings.Contains(bound, "."+base+"."); named != (len(path) < maxPath-12) {
			t.Errorf("%d-byte path bound as %s", len(path), bound)
		}
	}
}
