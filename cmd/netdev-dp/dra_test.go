package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDRAModeFlags: the mode and the health grace are checked, and DRA mode names
// what it lacks (the node name, a readable kubeconfig).
func TestDRAModeFlags(t *testing.T) {
	work := t.TempDir()
	config := vhostUserSetup(t, t.TempDir(), work)
	kubeconfig := filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--mode", "plugin"}, 2, `--mode "plugin": want deviceplugin or dra`},
		{[]string{"--mode", "dra", "--health-grace", "-1s"}, 2, "--health-grace -1s: must not be negative"},
		{[]string{"--mode", "dra", "--node-name", "", "--kubeconfig", kubeconfig}, 1, "DRA mode needs the node name"},
		{[]string{"--mode", "dra", "--node-name", "n1", "--kubeconfig", filepath.Join(work, "none")}, 1, "kubeconfig " + filepath.Join(work, "none")},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--config", config, "--devinfo-dir", filepath.Join(work, "devinfo"), "--cdi-dir", filepath.Join(work, "cdi"),
			"--kubelet-plugins-dir", filepath.Join(work, "plugins"), "--kubelet-registrar-dir", filepath.Join(work, "reg")}, tc.args...)
		if code := run(args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}
