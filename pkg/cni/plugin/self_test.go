package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// A delegate (or a delegate's IPAM plugin) that is this binary under any
// name, through a symbolic or a hard link, is refused; so is any delegate
// of a run that is already one devplumb deep. Another binary is fine.
func TestSelfCheck(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(exe, filepath.Join(dir, "selfie")); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hardself")
	if err := os.Link(exe, hard); err != nil {
		hard = "" // another filesystem: the symbolic link case still runs
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	list := func(plugin string) *libcni.NetworkConfigList {
		l, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.0.0","name":"n","plugins":[` + plugin + `]}`))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	self := []string{`{"type":"selfie"}`, `{"type":"other","ipam":{"type":"selfie"}}`, `{"type":"other"},{"type":"selfie"}`}
	if hard != "" {
		self = append(self, `{"type":"hardself"}`)
	}
	for _, p := range self {
		if err := selfCheck(dir, list(p), 0, selfFiles(exe)); !errors.Is(err, ErrSelfDelegation) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if err := selfCheck(dir, list(`{"type":"other","ipam":{"type":"missing"}}`), 0, selfFiles(exe)); err != nil {
		t.Errorf("another binary: %v", err)
	}
	if err := selfCheck(dir, list(`{"type":"other"}`), maxDepth, selfFiles(exe)); !errors.Is(err, ErrSelfDelegation) {
		t.Errorf("too deep: %v", err)
	}
}

// devplumb-direct is run by the entry point beside it, which the configs name
// "devplumb": a delegate that is that entry point (here under another name,
// by a link) is devplumb too; another file beside it is not.
func TestSelfCheckEntryPoint(t *testing.T) {
	bin, path := t.TempDir(), t.TempDir()
	for _, f := range []string{"devplumb-direct", entryPoint, "bridge"} {
		if err := os.WriteFile(filepath.Join(bin, f), []byte("#!/bin/sh\n# "+f+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"entry": entryPoint, "bridge": "bridge"} {
		if err := os.Symlink(filepath.Join(bin, target), filepath.Join(path, name)); err != nil {
			t.Fatal(err)
		}
	}
	list, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"entry"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	selves := selfFiles(filepath.Join(bin, "devplumb-direct"))
	if err := selfCheck(path, list, 0, selves); !errors.Is(err, ErrSelfDelegation) {
		t.Errorf("the entry point as a delegate: %v, want ErrSelfDelegation", err)
	}
	list.Plugins = list.Plugins[:1]
	if err := selfCheck(path, list, 0, selves); err != nil {
		t.Errorf("bridge beside devplumb-direct: %v", err)
	}
}
