package kube

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ErrUntrustedKubeconfig is matched (errors.Is) by LoadConfig's error for a
// kubeconfig that could run a command or read a file elsewhere on the node.
var ErrUntrustedKubeconfig = errors.New("kubeconfig not allowed")

// checkCredentials refuses what a kubeconfig could make devplumb, a root
// process, do besides presenting a credential: run a command (an exec
// credential plugin, or an auth-provider, which may run one too) or send a
// file from elsewhere on the node (a token, key, certificate or CA file
// outside the kubeconfig's own directory, where the installer writes them).
// Every user and cluster is checked, not only the current context's: a file
// that holds one entry that may not be used is not the installer's.
func checkCredentials(path string, cfg *clientcmdapi.Config) error {
	dir := filepath.Dir(path)
	var bad []string
	for _, name := range sortedKeys(cfg.AuthInfos) {
		u := cfg.AuthInfos[name]
		if u.Exec != nil {
			bad = append(bad, fmt.Sprintf("user %q runs the exec credential plugin %q", name, u.Exec.Command))
		}
		if u.AuthProvider != nil {
			bad = append(bad, fmt.Sprintf("user %q uses the auth-provider %q", name, u.AuthProvider.Name))
		}
		bad = append(bad, outside(dir, "user "+name, map[string]string{
			"tokenFile": u.TokenFile, "client-certificate": u.ClientCertificate, "client-key": u.ClientKey})...)
	}
	for _, name := range sortedKeys(cfg.Clusters) {
		bad = append(bad, outside(dir, "cluster "+name, map[string]string{
			"certificate-authority": cfg.Clusters[name].CertificateAuthority})...)
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: %s; devplumb takes a token, client certificate or CA inline or from a file in %s only",
		ErrUntrustedKubeconfig, path, strings.Join(bad, "; "), dir)
}

// outside lists the files of files (key: path; already made absolute by
// client-go, relative to the kubeconfig) that are not directly in dir.
func outside(dir, who string, files map[string]string) []string {
	var bad []string
	for _, key := range sortedKeys(files) {
		f := files[key]
		if f != "" && filepath.Dir(filepath.Clean(f)) != dir {
			bad = append(bad, fmt.Sprintf("%s's %s %s is outside %s", who, key, f, dir))
		}
	}
	return bad
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
