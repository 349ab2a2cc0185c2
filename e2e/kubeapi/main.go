package kubeapi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// EnvHelper set in a test binary's environment makes Main run the tests without a server:
// for tests that re-run their own binary as a helper process.
const EnvHelper = "DEVPLUMB_KUBEAPI_HELPER"

// Main is a test package's TestMain body: it starts a Server in a fresh temporary
// directory, hands it to setup (which keeps it for the tests and may prepare it), runs the
// tests, stops the server and removes the directory. It returns the exit code. A server
// that cannot start fails the package: the binaries are a prerequisite, not an option.
//
// If the test binary dies instead (a panic, go test's -timeout), the servers die with it
// (Pdeathsig) and the next Main removes the directory it left.
func Main(m *testing.M, prefix string, setup func(*Server) error) int {
	if os.Getenv(EnvHelper) != "" {
		return m.Run()
	}
	dir, err := TempDir(prefix)
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	s, err := Start(filepath.Join(dir, "server"))
	if err != nil {
		return fail(fmt.Errorf("start API server: %w", err))
	}
	defer s.Close()
	if err := setup(s); err != nil {
		return fail(err)
	}
	return m.Run()
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "FAIL:", err)
	return 1
}

// lockName is the file in a TempDir that its owner holds locked while it lives.
const lockName = ".owner.lock"

// TempDir creates a directory in os.TempDir() named prefix*, locked by this process for
// as long as it runs, after removing the prefix* directories whose owner is gone (the
// etcd data of a crashed run is tens of megabytes).
func TempDir(prefix string) (string, error) {
	removeStale(prefix)
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("kubeapi: temp dir: %w", err)
	}
	// Locked before it gets its name, so that removeStale never finds it unlocked.
	f, err := os.OpenFile(filepath.Join(dir, lockName+".new"), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, lockName))
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("kubeapi: lock temp dir: %w", err)
	}
	held = append(held, f) // never closed: the lock goes when the process does
	return dir, nil
}

var held []*os.File

// removeStale removes prefix* directories whose lock file exists and is not held. A
// directory without one is left alone: its owner may be about to create it.
func removeStale(prefix string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, d := range dirs {
		f, err := os.OpenFile(filepath.Join(d, lockName), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			os.RemoveAll(d)
		} else if !errors.Is(err, syscall.EWOULDBLOCK) {
			fmt.Fprintf(os.Stderr, "kubeapi: %s: %v\n", d, err)
		}
		f.Close()
	}
}
