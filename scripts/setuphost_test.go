// Package scripts holds the tests of the shell scripts that need no API server or
// built binaries (the build scripts' tests are in e2e/kubeapi).
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// The apt-get that setup-host.sh finds first in PATH in this test: the real one, and
// the real dpkg locks for install, but update reads an empty list of sources into
// lists and cache directories of the test's own, so that nothing is downloaded and the
// lists lock is the test's to hold.
const aptShim = `#!/bin/bash
echo "$*" >>"$SHIM_DIR/apt.log"
export PATH=$REAL_PATH
for a; do
	[ "$a" = update ] && exec apt-get -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$SHIM_DIR/parts" \
		-o Dir::State::Lists="$SHIM_DIR/lists" -o Dir::Cache="$SHIM_DIR/cache" "$@"
done
exec apt-get "$@"
`

// TestSetupHostWaitsForAptLocks: while another apt holds the lock that apt-get update
// (the lists lock) or apt-get install (the dpkg frontend lock) takes, setup-host.sh
// says once that it waits, waits, and installs once the lock is free.
func TestSetupHostWaitsForAptLocks(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("setup-host.sh installs only as root")
	}
	for _, tool := range []string{"apt-get", "pgrep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs a Debian host with %s: %v", tool, err)
		}
	}
	for _, tc := range []struct{ name, lock, waits string }{
		{"lists lock", "", "update"}, // the shim's lists directory
		{"dpkg frontend lock", "/var/lib/dpkg/lock-frontend", "install"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shimPath(t)
			lock := tc.lock
			if lock == "" {
				lock = filepath.Join(dir, "lists", "lock")
			}
			release := holdAptLock(t, lock)
			time.AfterFunc(3*time.Second, release)
			start := time.Now()
			out, err := runSetupHost(dir)
			if err != nil {
				t.Fatalf("setup-host.sh with %s held for 3 s: %v\n%s", lock, err, out)
			}
			if took := time.Since(start); took < 2*time.Second {
				t.Errorf("setup-host.sh took %v: the lock was not held?\n%s", took, out)
			}
			if n := strings.Count(out, "setup-host: waiting up to 30 s for another apt to finish: Could not get lock "+lock); n != 1 {
				t.Errorf("%d lines saying it waits for %s, want 1:\n%s", n, lock, out)
			}
			// The retry after the first failure is the one that waits.
			log, _ := os.ReadFile(filepath.Join(dir, "apt.log"))
			if !regexp.MustCompile(`(?m)^-o DPkg::Lock::Timeout=[1-9][0-9]* `+tc.waits+` `).Match(log) ||
				!strings.Contains(string(log), "install -y -qq --no-install-recommends procps") {
				t.Errorf("apt-get calls:\n%s", log)
			}
		})
	}
}

// shimPath is a PATH directory with the apt-get shim and the tools setup-host.sh
// looks for, all but pgrep: it installs procps, which the host has (a no-op install).
func shimPath(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range []string{"parts", "lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "apt-get"), []byte(aptShim), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"ip", "etcd", "runc", "qemu-aarch64-static", "unshare", "nsenter", "flock", "ldd", "id", "mktemp", "grep", "cat", "sleep", "rm"} {
		target, err := exec.LookPath(tool)
		if err != nil {
			target = "/bin/true" // etcd, runc, qemu before make test installs them: present is all it asks
		}
		if err := os.Symlink(target, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runSetupHost(dir string) (string, error) {
	cmd := exec.Command(filepath.Join(testenv.ModuleRoot(), "scripts", "setup-host.sh"))
	cmd.Env = append(os.Environ(), "PATH="+dir, "REAL_PATH="+os.Getenv("PATH"), "SHIM_DIR="+dir, "APT_LOCK_WAIT=30")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// holdAptLock takes the lock as apt does (fcntl, the whole file) until release.
func holdAptLock(t *testing.T, path string) (release func()) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLKW, &lk); err != nil {
		f.Close()
		t.Fatalf("lock %s: %v", path, err)
	}
	release = sync.OnceFunc(func() { f.Close() }) // closing drops the fcntl lock
	t.Cleanup(release)
	return release
}
