package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/devplumb/devplumb/pkg/base/unixsock"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// metricsAccess says who besides root may scrape the agent's metrics socket.
// The DaemonSet's metrics container runs as a non-root user so that it cannot
// reach the agent's CNI socket (which prepares and commits any pod's ADD and
// DEL); that user gets the metrics socket alone, in a directory of its own.
type metricsAccess struct {
	gid int // the socket's group, mode 0660; -1: root's, mode 0600
	uid int // the one peer uid admitted besides 0; -1: root only
}

// check refuses half a setting: a group without a uid admits nobody new (the
// peer check refuses them), a uid without a group cannot open the socket.
func (a metricsAccess) check() error {
	if (a.gid < 0) != (a.uid < 0) {
		return errors.New("--metrics-socket-gid and --metrics-peer-uid go together: the peer needs the group to open the socket and its uid to pass the peer check")
	}
	return nil
}

// listenMetrics opens the metrics socket as agentproto.Listen does (a stale
// socket replaced, a live one or another file refused) and, with a group,
// gives it to that group with mode 0660. Every connection's peer is checked
// (SO_PEERCRED): root or the admitted uid, else it is closed unanswered.
func listenMetrics(path string, acc metricsAccess, log *slog.Logger) (net.Listener, error) {
	if acc.gid >= 0 {
		if err := groupDir(filepath.Dir(path), acc.gid); err != nil {
			return nil, err
		}
	}
	l, err := agentproto.Listen(path)
	if err != nil {
		return nil, err
	}
	if acc.gid >= 0 {
		// Listen made it 0600 before this: the group gets it only now.
		if err := errors.Join(os.Chown(path, -1, acc.gid), os.Chmod(path, 0o660)); err != nil {
			l.Close()
			return nil, fmt.Errorf("metrics socket %s for group %d: %w", path, acc.gid, err)
		}
	}
	return &peerListener{Listener: l, uid: acc.uid, log: log}, nil
}

// groupDir makes the socket's directory 0750, root's and the group's, when it
// is missing (agentproto.Listen would make it 0700, closed to the group). An
// existing directory is left as it is: it is the node administrator's (the
// DaemonSet's hostPath makes it 0755), and it may not be the agent's alone.
func groupDir(dir string, gid int) error {
	_, err := os.Stat(dir)
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("metrics socket directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("metrics socket directory: %w", err)
	}
	if err := errors.Join(os.Chown(dir, -1, gid), os.Chmod(dir, 0o750)); err != nil {
		return fmt.Errorf("metrics socket directory %s for group %d: %w", dir, gid, err)
	}
	return nil
}

// peerListener accepts only root and uid: the file mode keeps others out, and
// this holds even against a process that got past it (CAP_DAC_OVERRIDE).
type peerListener struct {
	*unixsock.Listener
	uid int
	log *slog.Logger
}

// Accept returns the next connection whose peer is admitted; the others are
// closed here, so the HTTP server never reads a byte from them.
func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cred, err := peerCred(c)
		if err == nil && (cred.Uid == 0 || int(cred.Uid) == l.uid) {
			return c, nil
		}
		if err == nil {
			err = fmt.Errorf("uid %d (pid %d) is neither root nor --metrics-peer-uid", cred.Uid, cred.Pid)
		}
		l.log.Warn("metrics socket: peer refused", "err", err)
		c.Close()
	}
}

// peerCred is what the kernel recorded of the peer at connect: what it cannot
// lie about.
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return nil, fmt.Errorf("peer credentials (SO_PEERCRED): %w", credErr)
	}
	return cred, nil
}
