// Package e2etest holds what the end-to-end test packages share: a bounded test
// context, Must, the TestMain body of a package run against one API server, a run
// of the devplumb binary as a container runtime makes it, a pod's network-status,
// the one way manifests are read and sent to an API server, and a scrape of a
// daemon's secured metrics.
//
// It is the e2e layer's test-helper package, as pkg/testenv is the unit layer's.
package e2etest

import (
	"context"
	"testing"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// TestBound is how long one test's context lives: well above any single
// operation's own bound, so a test that hangs fails instead of stalling CI.
const TestBound = 2 * time.Minute

// Ctx is a test context bounded by TestBound, cancelled when the test ends.
func Ctx(t testing.TB) context.Context {
	return Context(t, TestBound)
}

// Context is a test context bounded by bound, cancelled when the test ends.
func Context(t testing.TB, bound time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return c
}

// Must fails the test on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// ServerMain is the TestMain body of a package whose tests share one API server:
// kubeapi.Main with a server that is kept in *srv for the tests.
func ServerMain(m *testing.M, prefix string, srv **kubeapi.Server) int {
	return kubeapi.Main(m, prefix, func(s *kubeapi.Server) error {
		*srv = s
		return nil
	})
}
