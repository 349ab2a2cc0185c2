package kube

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const kubeconfigHead = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://192.0.2.1:6443"%s}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
users:
- name: u
  user:
`

// A kubeconfig is a credential, never a program or a pointer to files
// elsewhere: the ones an attacker would write are refused, naming why, and
// the command of an exec user never runs.
func TestLoadConfigRefusesWhatRunsOrReadsElsewhere(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	for _, tc := range []struct{ name, cluster, user, want string }{
		{"exec", "", "    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'touch " + marker + "'], interactiveMode: Never}\n",
			`user "u" runs the exec credential plugin "/bin/sh"`},
		{"auth-provider", "", "    auth-provider: {name: oidc, config: {client-id: x}}\n", `user "u" uses the auth-provider "oidc"`},
		{"tokenFile elsewhere", "", "    tokenFile: /etc/shadow\n", `user u's tokenFile /etc/shadow is outside ` + dir},
		{"relative tokenFile above", "", "    tokenFile: ../token\n", `tokenFile ` + filepath.Join(filepath.Dir(dir), "token") + ` is outside`},
		{"client key elsewhere", "", "    client-certificate: /etc/kubernetes/pki/admin.crt\n    client-key: /etc/kubernetes/pki/admin.key\n",
			`client-key /etc/kubernetes/pki/admin.key is outside`},
		{"CA elsewhere", ", certificate-authority: /root/ca.crt", "    token: abc\n", `cluster c's certificate-authority /root/ca.crt is outside`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "kubeconfig")
			if err := os.WriteFile(path, []byte(strings.Replace(kubeconfigHead, "%s", tc.cluster, 1)+tc.user), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := New(path, time.Second, nil)
			if !errors.Is(err, ErrUntrustedKubeconfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v (client %v), want ErrUntrustedKubeconfig saying %q", err, c, tc.want)
			}
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the exec credential plugin ran")
	}
}

// What the installer writes is loaded: a token file beside the kubeconfig
// (relative or absolute), an inline CA, and a path spelled with extra slashes.
func TestLoadConfigAcceptsTheInstallersKubeconfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"    tokenFile: token\n", "    tokenFile: " + filepath.Join(dir, "token") + "\n", "    token: abc\n"} {
		path := filepath.Join(dir, "kubeconfig")
		if err := os.WriteFile(path, []byte(strings.Replace(kubeconfigHead, "%s", ", insecure-skip-tls-verify: true", 1)+user), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(dir + "//kubeconfig")
		if err != nil {
			t.Fatalf("%q: %v", user, err)
		}
		if cfg.Host != "https://192.0.2.1:6443" || (cfg.BearerTokenFile == "" && cfg.BearerToken != "abc") {
			t.Errorf("%q: host %q token file %q", user, cfg.Host, cfg.BearerTokenFile)
		}
		if cfg.BearerTokenFile != "" && cfg.BearerTokenFile != filepath.Join(dir, "token") {
			t.Errorf("token file %q, want the one beside the kubeconfig", cfg.BearerTokenFile)
		}
	}
}
