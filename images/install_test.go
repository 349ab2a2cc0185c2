// Package images holds the Dockerfiles; its test runs the installer script the devplumb
// image uses, against temp directories standing in for the host and the service account.
package images

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestInstallScriptWritesBinaryAndKubeconfig(t *testing.T) {
	dir := t.TempDir()
	fakeBin := filepath.Join(dir, "usr-local-bin")
	sa := filepath.Join(dir, "sa")
	for _, d := range []string{fakeBin, sa} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	must(t, os.WriteFile(filepath.Join(sa, "ca.crt"), ca, 0o644))
	must(t, os.WriteFile(filepath.Join(sa, "token"), []byte("tok-123"), 0o600))

	// The script copies /usr/local/bin/devplumb; run a copy that reads from fakeBin.
	script, err := os.ReadFile("devplumb/install.sh")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(fakeBin, "devplumb"), []byte("#!/bin/sh\necho devplumb\n"), 0o755))
	local := strings.ReplaceAll(string(script), "/usr/local/bin/devplumb", filepath.Join(fakeBin, "devplumb"))
	must(t, os.WriteFile(filepath.Join(dir, "install.sh"), []byte(local), 0o755))

	cniBin, kcDir := filepath.Join(dir, "host", "opt", "cni", "bin"), filepath.Join(dir, "host", "etc", "cni", "net.d", "devplumb.d")
	cmd := exec.Command("sh", filepath.Join(dir, "install.sh"), "install")
	cmd.Env = append(os.Environ(), "CNI_BIN_DIR="+cniBin, "KUBECONFIG_DIR="+kcDir, "SA_DIR="+sa,
		"KUBERNETES_SERVICE_HOST=fd00::1", "KUBERNETES_SERVICE_PORT=6443")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	st, err := os.Stat(filepath.Join(cniBin, "devplumb"))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("installed binary: %v %v", st, err)
	}
	kc := filepath.Join(kcDir, "devplumb.kubeconfig")
	st, err = os.Stat(kc)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig must be 0600: %v %v", st, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("kubeconfig does not load: %v", err)
	}
	if cfg.Host != "https://[fd00::1]:6443" || cfg.BearerToken != "tok-123" || string(cfg.CAData) != string(ca) {
		t.Fatalf("kubeconfig: host %q token %q CA %q", cfg.Host, cfg.BearerToken, base64.StdEncoding.EncodeToString(cfg.CAData))
	}
	if left, _ := filepath.Glob(filepath.Join(kcDir, ".*")); len(left) > 0 {
		t.Fatalf("temp files left: %v", left)
	}

	// Outside a pod it refuses clearly.
	cmd = exec.Command("sh", filepath.Join(dir, "install.sh"), "install")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CNI_BIN_DIR=" + cniBin, "KUBECONFIG_DIR=" + kcDir, "SA_DIR=" + sa}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "KUBERNETES_SERVICE_HOST") {
		t.Fatalf("without KUBERNETES_SERVICE_HOST: err %v, output %s", err, out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
