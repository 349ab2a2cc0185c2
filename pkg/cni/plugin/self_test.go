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
		if err := selfCheck(dir, list(p), 0); !errors.Is(err, ErrSelfDelegation) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if err := selfCheck(dir, list(`{"type":"other","ipam":{"type":"missing"}}`), 0); err != nil {
		t.Errorf("another binary: %v", err)
	}
	if err := selfCheck(dir, list(`{"type":"other"}`), maxDepth); !errors.Is(err, ErrSelfDelegation) {
		t.Errorf("too deep: %v", err)
	}
}
