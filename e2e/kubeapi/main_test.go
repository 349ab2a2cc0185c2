package kubeapi_test

import (
	"os"
	"testing"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// srv is this package's API server, started once by TestMain.
var srv *kubeapi.Server

func TestMain(m *testing.M) {
	os.Exit(e2etest.ServerMain(m, "devplumb-kubeapi-", &srv))
}
