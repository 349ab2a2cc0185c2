package kubeapi

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
)

// writeAuth writes the token file (one system:masters user) and the service account
// signing key pair that kube-apiserver requires even though no test uses them.
func (s *Server) writeAuth() error {
	tokens := fmt.Sprintf("%s,e2e-admin,e2e-admin,system:masters\n", s.Token)
	if err := os.WriteFile(filepath.Join(s.Dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return fmt.Errorf("kubeapi: token file: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("kubeapi: service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("kubeapi: service account key: %w", err)
	}
	files := map[string]*pem.Block{
		"sa.key": {Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)},
		"sa.pub": {Type: "PUBLIC KEY", Bytes: pub},
	}
	for name, block := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return fmt.Errorf("kubeapi: %s: %w", name, err)
		}
	}
	return nil
}
