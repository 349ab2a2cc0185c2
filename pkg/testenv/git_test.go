package testenv

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// FetchCommit in a shallow clone of this repository fetches an earlier commit from
// origin and says so; without an origin it reports ErrCommitMissing, which the
// upgrade test turns into a skip.
func TestFetchCommitInShallowClone(t *testing.T) {
	old, err := git(ModuleRoot(), "rev-parse", "HEAD~1")
	if err != nil {
		t.Skipf("this checkout has one commit only: %v", err)
	}
	clone := shallowClone(t)
	if hasCommit(clone, old) {
		t.Fatalf("the shallow clone has %s already", old)
	}
	var said []string
	logf := func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) }
	if err := FetchCommit(clone, old, logf); err != nil {
		t.Fatalf("FetchCommit: %v", err)
	}
	if !hasCommit(clone, old) || len(said) != 1 || !strings.Contains(said[0], "fetching commit "+old) {
		t.Fatalf("after FetchCommit: has it %v, said %q", hasCommit(clone, old), said)
	}
	if err := FetchCommit(clone, old, logf); err != nil || len(said) != 1 {
		t.Fatalf("FetchCommit with the commit there: %v, said %q", err, said)
	}

	alone := shallowClone(t)
	if _, err := git(alone, "remote", "remove", "origin"); err != nil {
		t.Fatal(err)
	}
	if err := FetchCommit(alone, old, logf); !errors.Is(err, ErrCommitMissing) {
		t.Fatalf("FetchCommit with no origin: %v", err)
	}
}

// shallowClone is git clone --depth 1 of this checkout's HEAD.
func shallowClone(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "clone")
	out, err := exec.Command("git", "clone", "--quiet", "--depth", "1", "file://"+ModuleRoot(), dir).CombinedOutput()
	if err != nil {
		t.Fatalf("git clone --depth 1: %v\n%s", err, out)
	}
	return dir
}
