package metricsauth

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	certutil "k8s.io/client-go/util/cert"
)

func TestTLSConfigNeedsBothFiles(t *testing.T) {
	if _, err := TLSConfig("/x/tls.crt", "", "node-a"); err == nil || !strings.Contains(err.Error(), "/x/tls.crt") {
		t.Errorf("cert without key: %v, want an error naming the file", err)
	}
	if _, err := TLSConfig("", "/x/tls.key", "node-a"); err == nil {
		t.Error("key without cert: no error")
	}
	dir := t.TempDir()
	if _, err := TLSConfig(filepath.Join(dir, "missing.crt"), filepath.Join(dir, "missing.key"), "node-a"); err == nil {
		t.Error("missing files: no error")
	}
}

func TestTLSConfigSelfSigned(t *testing.T) {
	cfg, err := TLSConfig("", "", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Certificates) != 1 || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("config %+v, want one self-signed certificate, TLS 1.2+", cfg)
	}
}

// A pair rotated on disk is what the next handshake serves.
func TestTLSConfigServesRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(host string) {
		c, k, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crt, c, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(key, k, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	cfg, err := TLSConfig(crt, key, "ignored")
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"first", "second"} {
		write(host)
		cert, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := certutil.ParseCertsPEM(mustRead(t, crt))
		if err != nil {
			t.Fatal(err)
		}
		if string(cert.Certificate[0]) != string(leaf[0].Raw) {
			t.Errorf("after writing %s's pair the handshake serves another certificate", host)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
