// Package dra_test runs devplumb, netdev-dp's DRA mode and nodesim's DRA kubelet
// against a real kube-apiserver (resource.k8s.io/v1, device status on by default).
package dra_test

import (
	"os"
	"testing"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// srv is this package's API server, started once by TestMain.
var srv *kubeapi.Server

func TestMain(m *testing.M) {
	os.Exit(e2etest.ServerMain(m, "devplumb-dra-", &srv))
}
