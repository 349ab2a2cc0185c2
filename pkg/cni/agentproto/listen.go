package agentproto

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/pkg/base/unixsock"
)

// DefaultSocket is where the agent listens and the entry point dials.
const DefaultSocket = "/run/devplumb/agent.sock"

// DefaultMetricsSocket is where the agent serves its metrics (root-only,
// plain HTTP) for devplumbctl metrics --agent-metrics.
const DefaultMetricsSocket = "/run/devplumb/agent-metrics.sock"

// Listen opens the agent's socket at path: its directory created 0700 when
// missing and the socket 0600, so only root reaches it (Serve checks the
// peer's uid as well). A socket file left by a dead agent is replaced; a live
// agent's socket, or a path that is not a socket, is refused.
func Listen(path string) (*unixsock.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("agent socket directory: %w", err)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	// It appears at path only once it listens, mode 0600 (unixsock): an
	// entry point that finds it is served, not refused into devplumb-direct.
	l, err := unixsock.Listen(path, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	return l, nil
}

// removeStale removes a socket file nobody listens on. What is not a socket
// is left alone: the path was misconfigured, and removing it could destroy
// someone's file.
func removeStale(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent socket %s: %w", path, err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("agent socket %s exists and is not a socket (%s): refusing to remove it", path, st.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("agent socket %s: another agent is listening on it", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("agent socket %s: cannot tell whether it is stale: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale agent socket: %w", err)
	}
	return nil
}
