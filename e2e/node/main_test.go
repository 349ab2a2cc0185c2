package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/e2e/node"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// nd is the package's node: one for all tests (a node takes minutes to come up here).
var nd *node.Node

// buildDir holds what BuildAll built: the images' binaries are compared with what the
// DaemonSets installed.
var buildDir string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := kubeapi.TempDir("devplumb-node-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)
	buildDir = filepath.Join(dir, "build")
	cni, tars, err := node.BuildAll(testenv.ModuleRoot(), buildDir)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n, err := node.Start(ctx, filepath.Join(dir, "node"), node.Options{CNIBinDir: cni, Images: tars})
	if err != nil {
		return fail(err)
	}
	nd = n
	code := m.Run()
	if err := n.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: node did not stop cleanly:", err)
		code = 1
	}
	for i := len(exits) - 1; i >= 0; i-- {
		exits[i]()
	}
	return code
}

// exits are run after the node stopped: what the package's tests share (devices).
var exits []func()

func atExit(f func()) { exits = append(exits, f) }

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "FAIL:", err)
	return 1
}

// ctx is a test context: a node's operations (a pod start pulls and runs) take longer
// than e2etest.TestBound.
func ctx(t *testing.T) context.Context {
	return e2etest.Context(t, 5*time.Minute)
}
