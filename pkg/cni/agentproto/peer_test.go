package agentproto

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const nobody = 65534

// A non-root process is kept out: by the socket's modes, and where those
// were loosened, by the agent's SO_PEERCRED check, which answers it an error,
// logs it, and goes on serving root.
func TestNonRootPeerRefused(t *testing.T) {
	dir := worldReadableDir(t)
	peer := copyTestBinary(t, dir)
	s := serve(t, dir, Server{})

	out := runPeer(t, peer, s.path)
	if !strings.Contains(out, "unavailable=true") || !strings.Contains(out, "not allowed to connect") {
		t.Errorf("peer through Listen's modes: %s", out)
	}

	for path, mode := range map[string]os.FileMode{filepath.Dir(s.path): 0o755, s.path: 0o666} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	out = runPeer(t, peer, s.path)
	if !strings.Contains(out, "unavailable=true") || !strings.Contains(out, "refused the connection: peer uid 65534") {
		t.Errorf("peer through loosened modes: %s", out)
	}
	if !strings.Contains(s.log.String(), "peer uid 65534") {
		t.Errorf("the refusal is not logged:\n%s", s.log)
	}
	stillServes(t, s.path)
	if prepared, _ := s.h.calls(); len(prepared) != 1 || prepared[0].ContainerID != "after" {
		t.Errorf("handler saw %+v, want only root's call", prepared)
	}
}

// worldReadableDir is a temporary directory uid 65534 can enter (t.TempDir's
// parent is 0700).
func worldReadableDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agentproto-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyTestBinary puts this test binary where uid 65534 may run it; run with
// peerEnv set, it is a client (TestMain).
func copyTestBinary(t *testing.T, dir string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, "peer.test")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// runPeer runs the client as uid and gid 65534 and returns what it printed.
func runPeer(t *testing.T, peer, socket string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, peer)
	cmd.Dir = filepath.Dir(peer)
	cmd.Env = append(os.Environ(), peerEnv+"="+socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("peer as uid %d: %v\n%s", nobody, err, out)
	}
	return string(out)
}
