package agentproto

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// impostorEnv makes the test binary an agent instead: run as uid 65534 by
// TestImpostorAgentRefused, it serves a testHandler on the socket the
// variable names, says "listening" and serves until killed.
const impostorEnv = "AGENTPROTO_TEST_IMPOSTOR_SOCKET"

func impostor(path string) int {
	l, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("listening")
	if err := Serve(context.Background(), l, &testHandler{}); err != nil {
		fmt.Println(err)
		return 1
	}
	return 0
}

// The entry point talks only to root listening where only root could have
// put the socket: a socket in a directory others may write (sticky or
// not), or one root does not own, is not dialled; a listener that is not
// root is hung up on before the hello. Each is ErrUnavailable (the entry
// point does the call itself) saying why, and the agent behind saw nothing.
func TestImpostorSocketRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		uid  int
		says string
	}{
		{"writable by others", 0o777, 0, "writable by group or others (mode -rwxrwxrwx)"},
		{"sticky", 0o777 | os.ModeSticky, 0, "writable by group or others (mode trwxrwxrwx)"},
		{"writable by group", 0o770, 0, "writable by group or others"},
		{"not root's", 0o755, nobody, "is not root's (owner uid 65534)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, t.TempDir(), Server{})
			dir := filepath.Dir(s.path)
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, tc.uid, 0); err != nil {
				t.Fatal(err)
			}
			_, err := Dial(s.path, 5*time.Second, "entry-test")
			wantUnavailable(t, err, dir, tc.says)
			if prepared, _ := s.h.calls(); len(prepared) != 0 || strings.Contains(s.log.String(), "peer") {
				t.Errorf("the agent behind heard from the entry point: %v\n%s", prepared, s.log)
			}
		})
	}
}

// A socket where only root could put it, and a process not root listening
// on it (the socket made while the directory was open, the directory closed
// after): the kernel's peer credentials refuse it.
func TestImpostorAgentRefused(t *testing.T) {
	dir := worldReadableDir(t)
	exe := copyTestBinary(t, dir)
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(run, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	path := filepath.Join(run, "agent.sock")
	startImpostor(t, exe, path)
	if err := os.Chmod(run, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Dial(path, 5*time.Second, "entry-test")
	wantUnavailable(t, err, path, "runs as uid 65534", "not root")
}

// startImpostor runs the test binary as uid 65534 serving on path, until
// the test ends.
func startImpostor(t *testing.T, exe, path string) {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Dir = filepath.Dir(exe)
	cmd.Env = append(os.Environ(), impostorEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("impostor as uid %d: %q, %v", nobody, line, err)
	}
}
