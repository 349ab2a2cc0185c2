// Package kubeapi runs a real kube-apiserver and etcd for end-to-end tests: one per test
// package (from TestMain, see Main), in a temporary directory, with static token
// authentication and RBAC authorization (the admin token is system:masters). Nothing is
// mocked.
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
	K8sVersion = "v1.37.2"
)

// FindBinary returns the executable named by the environment variable env, else
// cached (a file name) in the bin directory of the build scripts' cache
// ($DEVPLUMB_CACHE, default ~/.cache/devplumb). A missing or unusable binary is an error
// that names both places and says how to get it (how): tests fail rather than skip.
func FindBinary(env, cached, how string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if err := checkExec(p); err != nil {
			return "", fmt.Errorf("$%s: %w; %s", env, err, how)
		}
		return p, nil
	}
	cache := os.Getenv("DEVPLUMB_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%s: $%s not set and no home directory for the cache: %w; %s", cached, env, err, how)
		}
		cache = filepath.Join(home, ".cache", "devplumb")
	}
	p := filepath.Join(cache, "bin", cached)
	if err := checkExec(p); err != nil {
		return "", fmt.Errorf("$%s not set and %w; %s", env, err, how)
	}
	return p, nil
}

func findAPIServer() (string, error) {
	return FindBinary(EnvKubeAPIServer, "kube-apiserver-"+K8sVersion,
		"build it with scripts/build-kube-apiserver.sh (make test and make e2e run it)")
}

// findEtcd returns $DEVPLUMB_ETCD, else etcd from PATH (Debian: apt-get install etcd-server).
func findEtcd() (string, error) {
	const how = "install Debian's etcd-server package or set $" + EnvEtcd
	if p := os.Getenv(EnvEtcd); p != "" {
		if err := checkExec(p); err != nil {
			return "", fmt.Errorf("$%s: %w; %s", EnvEtcd, err, how)
		}
		return p, nil
	}
	p, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("etcd: $%s not set and no etcd in PATH; %s", EnvEtcd, how)
	}
	return p, nil
}

func checkExec(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%s is missing: %w", p, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}
