// Package dra_test runs devplumb, netdev-dp's DRA mode and nodesim's DRA kubelet
// against a real kube-apiserver (resource.k8s.io/v1, device status on by default).
package dra_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// srv is this package's API server, started once by TestMain.
var srv *kubeapi.Server

func TestMain(m *testing.M) {
	os.Exit(kubeapi.Main(m, "devplumb-dra-", func(s *kubeapi.Server) error {
		srv = s
		return nil
	}))
}

// ctx is a test context bounded well above any single operation's own bound.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}
