package kubeapi_test

import (
	"os"
	"testing"
	"time"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// srv is this package's API server, started once by TestMain.
var srv *kubeapi.Server

func TestMain(m *testing.M) {
	os.Exit(e2etest.ServerMain(m, "devplumb-kubeapi-", &srv))
}

// waitFor retries f for a minute.
func waitFor(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
