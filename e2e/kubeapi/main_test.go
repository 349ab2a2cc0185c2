package kubeapi_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// srv is this package's API server, started once by TestMain.
var srv *kubeapi.Server

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "devplumb-kubeapi-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err = kubeapi.Start(filepath.Join(dir, "server"))
	if err != nil {
		// Fail, do not skip: CI must have the binaries (see scripts/build-kube-apiserver.sh).
		fmt.Fprintln(os.Stderr, "FAIL: start API server:", err)
		return 1
	}
	defer srv.Close()
	return m.Run()
}

// ctx is a test context bounded well above any single operation's own bound.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}
