package attachment

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/base/safefile"
)

// within fails the test when fn does not return: a record that blocks a
// read while the state lock is held would stop every ADD on the node.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%s did not return", what)
	}
}

// hostileRecords puts, at the record paths of attachments c-fifo, c-zero,
// c-link and c-big, what another local user or a mistake could leave there:
// a FIFO, a link to /dev/zero, a link to a valid record elsewhere, and a
// record over the size limit. It returns their keys.
func hostileRecords(t *testing.T, s *Store) []Key {
	t.Helper()
	if err := os.MkdirAll(s.attachDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "rec.json")
	if err := os.WriteFile(elsewhere, []byte(`{"network":"net","containerID":"c-link","ifName":"net1","deviceID":"d9"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	make := map[string]func(p string) error{
		"c-fifo": func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"c-zero": func(p string) error { return os.Symlink("/dev/zero", p) },
		"c-link": func(p string) error { return os.Symlink(elsewhere, p) },
		"c-big": func(p string) error {
			return os.WriteFile(p, []byte(`{"network":"net"`+strings.Repeat(" ", maxRecordSize)+`}`), 0o600)
		},
	}
	var keys []Key
	for cid, mk := range make {
		k := Key{Network: "net", ContainerID: cid, IfName: "net1"}
		p, err := s.path(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := mk(p); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return keys
}

// Every read of state refuses records that are not small regular files,
// names them, and never blocks: Get, Take (under the lock), List, Release
// and RemoveCorrupt.
func TestHostileRecordsAreRefusedWithoutBlocking(t *testing.T) {
	s := New(t.TempDir())
	keys := hostileRecords(t, s)
	for _, k := range keys {
		within(t, "Get "+k.ContainerID, func() {
			p, _ := s.path(k)
			if a, err := s.Get(k); err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("Get %s: %+v %v", k.ContainerID, a, err)
			}
		})
	}
	within(t, "Take", func() {
		c, err := s.Take(req("p", "c1", "net1", "d9"))
		if err != nil || c.Record.DeviceID != "d9" {
			t.Errorf("take beside hostile records: %+v %v", c, err)
		}
		for _, k := range keys {
			if c == nil || c.Unreadable == nil || !strings.Contains(c.Unreadable.Error(), k.ContainerID) {
				t.Errorf("record %s not reported: %v", k.ContainerID, c.Unreadable)
			}
		}
	})
	within(t, "List", func() {
		if all, err := s.List(); len(all) != 1 || err == nil {
			t.Errorf("List: %+v %v", all, err)
		}
	})
	within(t, "RemoveCorrupt", func() {
		gone, err := s.RemoveCorrupt("net", func(k Key) bool { return k.ContainerID == "c-big" })
		if err != nil || len(gone) != 3 {
			t.Errorf("RemoveCorrupt: %v %v", gone, err)
		}
	})
	within(t, "Release", func() {
		if err := s.Release(Key{Network: "net", ContainerID: "c-big", IfName: "net1"}); err != nil {
			t.Error(err)
		}
	})
	ents, _ := os.ReadDir(s.attachDir())
	if len(ents) != 1 {
		t.Errorf("left in state: %v", ents)
	}
}

// No part of the state directory may lead elsewhere: with stateDir itself,
// its lock or its attachments directory a link, or stateDir writable by
// others, Take and Release fail and nothing appears in the link's target.
func TestStateDirLinksAreRefused(t *testing.T) {
	cases := map[string]func(t *testing.T, dir, target string){
		"stateDir is a link": func(t *testing.T, dir, target string) { mustLink(t, target, dir) },
		"attachments is a link": func(t *testing.T, dir, target string) {
			mustMkdir(t, dir, 0o700)
			mustLink(t, target, filepath.Join(dir, "attachments"))
		},
		"lock is a link": func(t *testing.T, dir, target string) {
			mustMkdir(t, dir, 0o700)
			mustLink(t, filepath.Join(target, "victim"), filepath.Join(dir, "lock"))
		},
		"lock is a FIFO": func(t *testing.T, dir, _ string) { // opened without blocking, then refused
			mustMkdir(t, dir, 0o700)
			if err := syscall.Mkfifo(filepath.Join(dir, "lock"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"stateDir writable by others": func(t *testing.T, dir, _ string) { mustMkdir(t, dir, 0o777) },
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			root, target := t.TempDir(), t.TempDir()
			dir := filepath.Join(root, "state")
			setup(t, dir, target)
			s := New(dir)
			if _, err := s.Take(req("p", "c1", "net1", "d0")); err == nil {
				t.Error("Take succeeded")
			}
			if err := s.Release(Key{Network: "net", ContainerID: "c1", IfName: "net1"}); err == nil {
				t.Error("Release succeeded")
			}
			if ents, _ := os.ReadDir(target); len(ents) != 0 {
				t.Errorf("written in the link's target: %v", ents)
			}
		})
	}
}

// A Store checks its directories once (it serves one call); the next
// call's Store checks afresh: an attachments directory swapped for a link
// after a call is refused by the next one, which writes nothing there.
func TestEachStoreChecksItsDirsAfresh(t *testing.T) {
	root, target := t.TempDir(), t.TempDir()
	dir := filepath.Join(root, "state")
	if _, err := New(dir).Take(req("p", "c1", "net1", "d0")); err != nil {
		t.Fatalf("first call's Take: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "attachments")); err != nil {
		t.Fatal(err)
	}
	mustLink(t, target, filepath.Join(dir, "attachments"))
	if _, err := New(dir).Take(req("p", "c2", "net1", "d1")); !errors.Is(err, safefile.ErrUnsafeDir) {
		t.Errorf("next call's Take: %v, want an unsafe directory refused", err)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("written in the link's target: %v", ents)
	}
}

func mustLink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

// Keys too long for a plain file name get a hashed one: every operation
// works, no name exceeds the limit, and two long keys never share a file.
func TestLongKeysAreHashed(t *testing.T) {
	s := New(t.TempDir())
	long := strings.Repeat("n", 240)
	a := Request{Key: Key{Network: long, ContainerID: strings.Repeat("c", 300), IfName: "net1"}, ResourceName: "r", Candidates: []string{"d0"}}
	b := a
	b.Key.ContainerID += "x"
	b.Candidates = []string{"d1"}
	for _, r := range []Request{a, b} {
		if _, err := s.Take(r); err != nil {
			t.Fatal(err)
		}
		p, _ := s.path(r.Key)
		if len(filepath.Base(p)) > maxName {
			t.Errorf("record name %d bytes", len(filepath.Base(p)))
		}
		if got, err := s.Get(r.Key); err != nil || got == nil || got.DeviceID != r.Candidates[0] {
			t.Errorf("Get: %+v %v", got, err)
		}
	}
	if all, err := s.List(); err != nil || len(all) != 2 {
		t.Errorf("List: %v %v", all, err)
	}
	for _, r := range []Request{a, b} {
		if err := s.Release(r.Key); err != nil {
			t.Error(err)
		}
	}
	if ents, _ := os.ReadDir(s.attachDir()); len(ents) != 0 {
		t.Errorf("left: %v", ents)
	}
}

// A new sandbox takes over only the devices of the same pod (same UID) whose
// sandbox is gone: not those of a pod recreated under the same name, nor of
// a sandbox still there.
func TestOnlyGoneSandboxesOfTheSamePodAreTakenOver(t *testing.T) {
	cases := map[string]func(r *Request){
		"other UID":     func(r *Request) { r.Pod.UID = "uid-other" },
		"no UID":        func(r *Request) { r.Pod.UID = "" },
		"sandbox alive": func(r *Request) { r.SandboxGone = func(*Record) bool { return false } },
		"unknown":       func(r *Request) { r.SandboxGone = nil },
	}
	for name, mod := range cases {
		s := New(t.TempDir())
		if _, err := s.Take(req("p", "old", "net1", "d0")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Take(req("p", "old", "net2", "d9")); err != nil {
			t.Fatal(err)
		}
		r := req("p", "new", "net1", "d0")
		mod(&r)
		c, err := s.Take(r)
		if !errors.Is(err, ErrNoFreeDevice) || len(c.Dropped) != 0 {
			t.Errorf("%s: %+v %v", name, c, err)
		}
		if all, _ := s.List(); len(all) != 2 {
			t.Errorf("%s: the old sandbox lost its records: %+v", name, all)
		}
	}
}
