package kubeapi

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFindBinaryFailsClearly(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DEVPLUMB_CACHE", dir)
	const env, how = "DEVPLUMB_TEST_BIN", "build it with scripts/build-x.sh"
	notExec := filepath.Join(dir, "plain")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ env, want string }{
		{"", filepath.Join(dir, "bin", "x-v1") + " is missing"},
		{filepath.Join(dir, "nope"), filepath.Join(dir, "nope") + " is missing"},
		{dir, dir + " is not an executable file"},
		{notExec, notExec + " is not an executable file"},
	} {
		t.Setenv(env, tc.env)
		_, err := FindBinary(env, "x-v1", how)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), how) ||
			!strings.Contains(err.Error(), "$"+env) {
			t.Errorf("%s=%q: got %v, want an error saying %q, naming $%s and how to build it", env, tc.env, err, tc.want, env)
		}
	}
	exe := filepath.Join(dir, "bin", "x-v1")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(env, "")
	if p, err := FindBinary(env, "x-v1", how); err != nil || p != exe {
		t.Fatalf("cached binary: %q, %v", p, err)
	}
}

func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	for range 20 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if lo-minPort >= 1000 && (p < minPort || p >= lo) {
			t.Fatalf("port %d is not in [%d, %d)", p, minPort, lo)
		}
	}
}

func TestTempDirRemovesOnlyDeadOwnersDirs(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	const prefix = "devplumb-harness-test-"
	mine, err := TempDir(prefix)
	if err != nil {
		t.Fatal(err)
	}
	// A crashed owner: the lock file is there, nobody holds it.
	dead := filepath.Join(os.TempDir(), prefix+"dead")
	noLock := filepath.Join(os.TempDir(), prefix+"starting")
	for _, d := range []string{dead, noLock} {
		if err := os.MkdirAll(filepath.Join(d, "etcd"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dead, lockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	next, err := TempDir(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("dead owner's dir not removed: %v", err)
	}
	for _, d := range []string{mine, next, noLock} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("live or unlocked dir %s removed: %v", d, err)
		}
	}
}

// TestChildrenDieWithTestProcess: a test binary that panics after starting a server
// process takes the process with it, so a crashed test leaves nothing running.
func TestChildrenDieWithTestProcess(t *testing.T) {
	if os.Getenv(EnvHelper) == "panic" {
		p, err := spawn(t.TempDir(), "sleeper", "/bin/sleep", "600")
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("child " + strconv.Itoa(p.cmd.Process.Pid) + "\n")
		panic("test crashes with a server running")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildrenDieWithTestProcess$", "-test.v")
	cmd.Env = append(os.Environ(), EnvHelper+"=panic")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "child "); ok {
			pid, _ = strconv.Atoi(n)
		}
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("helper did not crash")
	}
	if pid == 0 {
		t.Fatal("helper started no child")
	}
	// SIGKILL is delivered asynchronously: wait for it, within a bound that only a
	// missing Pdeathsig can exhaust.
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("child %d still running after its test process died", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive tells whether pid runs (a zombie waiting for its reaper does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
