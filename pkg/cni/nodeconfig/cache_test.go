package nodeconfig

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A file rewritten in place right after it was read, with the same size, is
// read again.
func TestCacheRereadsInPlaceWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.json")
	var c Cache
	for _, dir := range []string{"/aaaa", "/bbbb", "/cccc"} {
		must(t, os.WriteFile(path, []byte(`{"stateDir":"`+dir+`"}`), 0o644)) // in place, same size
		n, err := c.Load(path)
		if err != nil || n.StateDir != dir {
			t.Fatalf("load after writing %s: %+v %v", dir, n, err)
		}
	}
}

// A settled file is kept until it changes: replaced (a new inode, as a
// ConfigMap's update), written in place, replaced by what Load refuses, or
// removed.
func TestCacheFollowsChanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.json")
	c := Cache{settle: time.Nanosecond}
	load := func(want string) {
		t.Helper()
		time.Sleep(2 * time.Millisecond) // past settle
		n, err := c.Load(path)
		if err != nil || n.StateDir != want {
			t.Fatalf("load: %+v %v, want stateDir %s", n, err, want)
		}
		n.StateDir = "/changed by the caller"
	}
	must(t, os.WriteFile(path, []byte(`{"stateDir":"/a"}`), 0o644))
	load("/a")
	load("/a") // the kept one, not the caller's changed copy
	next := filepath.Join(dir, "next.json")
	must(t, os.WriteFile(next, []byte(`{"stateDir":"/b"}`), 0o644))
	must(t, os.Rename(next, path))
	load("/b")
	must(t, os.WriteFile(path, []byte(`{"stateDir":"/cc"}`), 0o644))
	load("/cc")
	must(t, os.Remove(path))
	must(t, syscall.Mkfifo(path, 0o600))
	time.Sleep(2 * time.Millisecond)
	if n, err := c.Load(path); err == nil {
		t.Fatalf("a FIFO in the config's place: the kept config came back: %+v", n)
	}
	must(t, os.Remove(path))
	load(DefaultStateDir)
}

// A kept config is not read and decoded again: a Load of an unchanged file
// allocates a fraction of what reading it does. One whose file changed within
// settle (here: a file whose mtime is ahead of the clock) is read every time,
// as a file system whose clock ticks coarsely may give a write right after
// the read the times the read saw.
func TestCacheKeepsOnlySettledFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.json")
	must(t, os.WriteFile(path, []byte(`{"kubeconfig":"/etc/k/kc","stateDir":"/s","deviceInfoDir":"/d"}`), 0o644))
	read := testing.AllocsPerRun(20, func() { _, _ = Load(path) })
	c := Cache{settle: time.Nanosecond}
	time.Sleep(2 * time.Millisecond)
	if _, err := c.Load(path); err != nil {
		t.Fatal(err)
	}
	if kept := testing.AllocsPerRun(20, func() { _, _ = c.Load(path) }); kept*2 > read {
		t.Errorf("a kept config's Load allocates %v times, reading it %v: it was read again", kept, read)
	}
	ahead := time.Now().Add(time.Hour)
	must(t, os.Chtimes(path, ahead, ahead))
	var unsettled Cache
	if again := testing.AllocsPerRun(20, func() { _, _ = unsettled.Load(path) }); again*2 <= read {
		t.Errorf("an unsettled config's Load allocates %v times, reading it %v: it was kept", again, read)
	}
}
