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

// DevplumbUser is the user name of the devplumb service account of deployments/rbac.yaml:
// RBAC matches a ServiceAccount subject by this name, so a static token for it stands in
// for the token the kubelet would project into the DaemonSet's pod.
const DevplumbUser = "system:serviceaccount:kube-system:devplumb"

// writeAuth writes the token file (a system:masters user, and DevplumbUser) and the service
// account signing key pair that kube-apiserver requires even though no test uses it.
func (s *Server) writeAuth() error {
	s.DevplumbToken = randomHex(16)
	tokens := fmt.Sprintf("%s,e2e-admin,e2e-admin,system:masters\n", s.Token) +
		fmt.Sprintf("%s,%s,devplumb-uid,\"system:serviceaccounts,system:serviceaccounts:kube-system\"\n", s.DevplumbToken, DevplumbUser)
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
