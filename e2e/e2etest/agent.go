package e2etest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/agent"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
)

// ServeAgent serves a node agent built from cfg in this process until the
// test ends, and returns its socket.
func ServeAgent(t *testing.T, cfg agent.Config) string {
	t.Helper()
	// Each call marks the process's delegates one devplumb deeper
	// (plugin.DepthEnv): restored at the end, so that the devplumb binaries
	// later tests run are not refused as devplumb's own delegates.
	t.Setenv(plugin.DepthEnv, "")
	a := agent.New(cfg)
	dir, err := os.MkdirTemp("", "agent") // t.TempDir() may be too long for a socket path
	Must(t, err)
	socket := filepath.Join(dir, "agent.sock")
	l, err := agentproto.Listen(socket)
	Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agentproto.Serve(ctx, l, a) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		a.Close()
		os.RemoveAll(dir)
	})
	return socket
}
