package agentproto

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerCred is the connecting process's credentials as the kernel recorded
// them at connect (SO_PEERCRED): what the peer cannot lie about, unlike
// anything it sends.
func peerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("peer %s is not on a unix socket: its credentials are unknown", c.RemoteAddr())
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	err = raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err = errors.Join(err, credErr); err != nil {
		return nil, fmt.Errorf("peer credentials (SO_PEERCRED): %w", err)
	}
	return cred, nil
}
