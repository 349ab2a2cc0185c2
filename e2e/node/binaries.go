package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// Environment variables naming the node's binaries; the build scripts print them:
//
//	DEVPLUMB_KUBE_NODE=$(scripts/build-kube-node.sh | tail -1)    kubelet, kube-scheduler, kube-controller-manager
//	DEVPLUMB_CONTAINERD=$(scripts/build-containerd.sh | tail -1)  containerd, containerd-shim-runc-v2, ctr
//
// runc comes from PATH (Debian package runc); kube-apiserver and etcd as for e2e/kubeapi.
const (
	EnvKubeNode   = "DEVPLUMB_KUBE_NODE"
	EnvContainerd = "DEVPLUMB_CONTAINERD"
	// ContainerdVersion is what scripts/build-containerd.sh builds by default.
	ContainerdVersion = "v2.4.2"
)

// binaries are the node's programs.
type binaries struct {
	kubelet, scheduler, controllerManager string
	containerd, ctr, shimDir              string
	runc                                  string
}

func findBinaries() (*binaries, error) {
	kube, err := findDir(EnvKubeNode, "kube-node-"+kubeapi.K8sVersion,
		"build them with scripts/build-kube-node.sh (make test and make e2e run it)",
		"kubelet", "kube-scheduler", "kube-controller-manager")
	if err != nil {
		return nil, err
	}
	ctd, err := findDir(EnvContainerd, "containerd-"+ContainerdVersion,
		"build them with scripts/build-containerd.sh (make test and make e2e run it)",
		"containerd", "containerd-shim-runc-v2", "ctr")
	if err != nil {
		return nil, err
	}
	b := &binaries{
		kubelet: filepath.Join(kube, "kubelet"), scheduler: filepath.Join(kube, "kube-scheduler"),
		controllerManager: filepath.Join(kube, "kube-controller-manager"),
		containerd:        filepath.Join(ctd, "containerd"), ctr: filepath.Join(ctd, "ctr"), shimDir: ctd,
	}
	if b.runc, err = exec.LookPath("runc"); err != nil {
		return nil, fmt.Errorf("runc not in PATH: install Debian's runc package (make test does as root)")
	}
	return b, nil
}

// findDir is the directory $env names, else <cache>/bin/<cached>, checked to hold the
// executables names. A missing one is an error saying how to get it: tests fail, not skip.
func findDir(env, cached, how string, names ...string) (string, error) {
	dir := os.Getenv(env)
	where := "$" + env
	if dir == "" {
		cache := os.Getenv("DEVPLUMB_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("$%s not set and no home directory for the cache: %w; %s", env, err, how)
			}
			cache = filepath.Join(home, ".cache", "devplumb")
		}
		dir = filepath.Join(cache, "bin", cached)
		where = "$" + env + " not set and the cache"
	}
	for _, n := range names {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s: no executable %s in %s; %s", where, n, dir, how)
		}
	}
	return dir, nil
}
