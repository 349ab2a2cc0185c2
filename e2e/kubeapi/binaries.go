// Package kubeapi runs a real kube-apiserver and etcd for end-to-end tests: one per test
// package (from TestMain), in a temporary directory, with static token authentication
// and RBAC authorization (the admin token is system:masters). Nothing is mocked.
package kubeapi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Environment variables naming the binaries. The build scripts print them:
//
//	DEVPLUMB_KUBE_APISERVER=$(scripts/build-kube-apiserver.sh | tail -1)
//	DEVPLUMB_ETCD=/usr/bin/etcd   (Debian package etcd-server)
const (
	EnvKubeAPIServer = "DEVPLUMB_KUBE_APISERVER"
	EnvEtcd          = "DEVPLUMB_ETCD"
	// K8sVersion is the kube-apiserver version that scripts/build-kube-apiserver.sh builds
	// by default and that is looked for in its cache when EnvKubeAPIServer is not set.
	K8sVersion = "v1.34.12"
)

// findAPIServer returns the kube-apiserver binary: $DEVPLUMB_KUBE_APISERVER, else the one
// scripts/build-kube-apiserver.sh left in its cache. A missing binary is an error saying
// how to build it: the tests fail rather than skip.
func findAPIServer() (string, error) {
	if p := os.Getenv(EnvKubeAPIServer); p != "" {
		return checkExec(EnvKubeAPIServer, p)
	}
	cache := os.Getenv("DEVPLUMB_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("kube-apiserver: %s not set and no home directory: %w", EnvKubeAPIServer, err)
		}
		cache = filepath.Join(home, ".cache", "devplumb")
	}
	p := filepath.Join(cache, "bin", "kube-apiserver-"+K8sVersion)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("kube-apiserver: %s not set and %s missing; build it with scripts/build-kube-apiserver.sh (make test and make e2e run it)", EnvKubeAPIServer, p)
	}
	return checkExec("kube-apiserver", p)
}

// findEtcd returns $DEVPLUMB_ETCD, else etcd from PATH (Debian: apt-get install etcd-server).
func findEtcd() (string, error) {
	if p := os.Getenv(EnvEtcd); p != "" {
		return checkExec(EnvEtcd, p)
	}
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("etcd: %s not set and no etcd in PATH; install Debian's etcd-server package: %w", EnvEtcd, err)
	}
	return p, nil
}

func checkExec(what, p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s: %s is not an executable file", what, p)
	}
	return p, nil
}
