package kubeapi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestBuildScriptsWaitForEachOther: a build script started while another builds the same
// version waits for it and then uses its binary instead of building again in the same
// work directory (parallel CI jobs share the cache).
func TestBuildScriptsWaitForEachOther(t *testing.T) {
	for _, tc := range []struct {
		script, work, out string
		files             []string // the binaries in out, a directory, when set
	}{
		{"build-kube-apiserver.sh", "kube-apiserver-" + K8sVersion, "kube-apiserver-" + K8sVersion, nil},
		{"build-multus.sh", "multus-v4.3.0", "multus-v4.3.0", nil},
		{"build-kube-node.sh", "kube-node-" + K8sVersion, "kube-node-" + K8sVersion,
			[]string{"kubelet", "kube-scheduler", "kube-controller-manager"}},
		{"build-containerd.sh", "containerd-v2.4.2", "containerd-v2.4.2", []string{"containerd", "containerd-shim-runc-v2", "ctr"}},
	} {
		t.Run(tc.script, func(t *testing.T) {
			cache := t.TempDir()
			work := filepath.Join(cache, "build", tc.work)
			if err := os.MkdirAll(work, 0o755); err != nil {
				t.Fatal(err)
			}
			lock, err := os.OpenFile(work+".lock", os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Close()
			if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(filepath.Join(testenv.ModuleRoot(), "scripts", tc.script))
			cmd.Env = append(os.Environ(), "DEVPLUMB_CACHE="+cache, "K8S_VERSION="+K8sVersion, "MULTUS_VERSION=v4.3.0", "CONTAINERD_VERSION=v2.4.2",
				"GOFLAGS=-mod=mod", "GOPROXY=off") // a build that starts anyway fails fast
			var out strings.Builder
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// The other build finishes while this one waits in flock.
			if err := waitForChild(cmd.Process.Pid, "flock", done); err != nil {
				t.Fatalf("%s did not wait for the lock: %v (output %q)", tc.script, err, out.String())
			}
			bin := filepath.Join(cache, "bin", tc.out)
			writeBinaries(t, bin, tc.files)
			_ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
			select {
			case err := <-done:
				if err != nil || strings.TrimSpace(out.String()) != bin {
					t.Fatalf("script: %v, printed %q, want %s", err, out.String(), bin)
				}
			case <-time.After(time.Minute):
				_ = cmd.Process.Kill()
				t.Fatal("script still running a minute after the lock was released")
			}
			if _, err := os.Stat(filepath.Join(work, "go.mod")); !os.IsNotExist(err) {
				t.Fatalf("the waiting script built anyway (go.mod in %s): %v", work, err)
			}
		})
	}
}

// writeBinaries stands in for a finished build: the executable bin, or the directory bin
// holding files.
func writeBinaries(t *testing.T, bin string, files []string) {
	t.Helper()
	paths := []string{bin}
	if len(files) > 0 {
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		paths = nil
		for _, f := range files {
			paths = append(paths, filepath.Join(bin, f))
		}
	}
	for _, p := range paths {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// waitForChild waits until process pid has a child named comm; it fails if done reports
// the process ended first, or after a minute.
func waitForChild(pid int, comm string, done <-chan error) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return fmt.Errorf("exited first: %v", err)
		default:
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		for _, c := range strings.Fields(string(b)) {
			name, _ := os.ReadFile("/proc/" + c + "/comm")
			if strings.TrimSpace(string(name)) == comm {
				return nil
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("no %s child within a minute", comm)
}

// TestBuildLibPicksTheGoKubernetesNeeds: a Kubernetes release whose go.mod needs a newer
// Go than the local one (1.38 needs 1.27) is built with the Go its .go-version pins (the
// go line's when it has none); one the local Go can build keeps the local Go.
func TestBuildLibPicksTheGoKubernetesNeeds(t *testing.T) {
	lib := filepath.Join(testenv.ModuleRoot(), "scripts", "build-lib.sh")
	for _, tc := range []struct {
		goLine, goVersion, want string
	}{
		{"1.99.0", "1.99.3", "go1.99.3"},
		{"1.99.0", "", "go1.99.0"},
		{"1.20.0", "1.20.14", ""},
	} {
		cache := t.TempDir()
		dir := filepath.Join(cache, "k8s.io", "kubernetes@v9.9.9")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if tc.goVersion != "" {
			if err := os.WriteFile(filepath.Join(dir, ".go-version"), []byte(tc.goVersion+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		mod := filepath.Join(cache, "kubernetes.mod")
		if err := os.WriteFile(mod, []byte("module k8s.io/kubernetes\n\ngo "+tc.goLine+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "-c", `. "$1"; K8S_VERSION=v9.9.9; unset GOTOOLCHAIN; k8s_toolchain "$2"; echo "GOTOOLCHAIN=${GOTOOLCHAIN:-}"`, "-", lib, mod)
		cmd.Env = append(os.Environ(), "GOMODCACHE="+cache, "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", tc.goLine, err, out)
		}
		if got := strings.TrimSpace(string(out)); !strings.HasSuffix(got, "GOTOOLCHAIN="+tc.want) {
			t.Errorf("go line %s, .go-version %q: %s, want GOTOOLCHAIN=%s", tc.goLine, tc.goVersion, got, tc.want)
		}
	}
}
