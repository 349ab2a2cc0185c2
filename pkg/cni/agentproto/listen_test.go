package agentproto

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Listen makes the directory 0700 and the socket 0600, replaces a dead
// agent's socket, and refuses a live agent's socket or a path that is not a
// socket, leaving it as it was.
func TestListen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale.sock")
	staleSocket(t, stale)
	live := filepath.Join(dir, "live.sock")
	running, err := Listen(live)
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()

	for _, tc := range []struct{ name, path, refusal string }{
		{"new", filepath.Join(dir, "run", "devplumb", "agent.sock"), ""},
		{"stale socket", stale, ""},
		{"not a socket", file, "is not a socket"},
		{"live socket", live, "another agent is listening"},
		{"directory", dir, "is not a socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Listen(tc.path)
			if tc.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refusal) {
					t.Fatalf("Listen(%s) = %v, want an error saying %q", tc.path, err, tc.refusal)
				}
				if _, err := os.Stat(tc.path); err != nil {
					t.Errorf("refused path is gone: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			wantMode(t, tc.path, os.ModeSocket|0o600)
			if tc.name == "new" {
				wantMode(t, filepath.Dir(tc.path), os.ModeDir|0o700)
			}
		})
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("the refused file now holds %q, %v", b, err)
	}
}

func wantMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode() != want {
		t.Errorf("%s has mode %v, want %v", path, st.Mode(), want)
	}
}
