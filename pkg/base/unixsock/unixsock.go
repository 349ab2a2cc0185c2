// Package unixsock listens on unix sockets that appear only once they listen.
//
// net.Listen binds, which makes the socket file, and listens after that: in
// between, the file exists and a connect is refused. A client that takes the
// file for the server being up (a script or test waiting for it, a kubelet
// watching a directory) fails in that window. Listen binds under a temporary
// name in the same directory and renames the socket into place once it
// listens, with its final mode set.
package unixsock

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
)

// seq tells apart the temporary names of one process's listens.
var seq atomic.Uint64

// Listener is a unix socket listener whose Close removes its socket file, as
// net.Listen's does.
type Listener struct {
	*net.UnixListener
	path string
}

// Listen listens on a unix socket at path with mode perm. A socket at path
// is replaced (the caller decides beforehand whether a live one may be);
// anything else there is refused, as a bind refuses it, not renamed over.
func Listen(path string, perm os.FileMode) (*Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("listen on %s: it exists and is not a socket (%s)", path, fi.Mode().Type())
	}
	tmp := tempName(path)
	os.Remove(tmp) // a socket another process of this pid left
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false) // it would unlink tmp, gone by then
	// bind applied the umask; the mode is set before the socket is at path.
	if err := os.Chmod(tmp, perm); err != nil {
		return nil, cleanup(l, tmp, fmt.Errorf("socket mode of %s: %w", path, err))
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, cleanup(l, tmp, fmt.Errorf("socket %s: %w", path, err))
	}
	return &Listener{UnixListener: l, path: path}, nil
}

// maxPath is the longest unix socket path Linux takes (sun_path less its NUL).
const maxPath = 107

// tempName is where path's socket is bound: beside it, named after it (a
// connection's peer address stays the bound name, and shows up in errors),
// the pid and a number; only these when that is too long for a socket path.
func tempName(path string) string {
	dir, id := filepath.Dir(path), strconv.Itoa(os.Getpid())+"-"+strconv.FormatUint(seq.Add(1), 10)
	if tmp := filepath.Join(dir, "."+filepath.Base(path)+"."+id); len(tmp) <= maxPath {
		return tmp
	}
	return filepath.Join(dir, "."+id)
}

func cleanup(l *net.UnixListener, tmp string, err error) error {
	l.Close()
	os.Remove(tmp)
	return err
}

// Close stops listening and removes the socket file. Only the first Close
// removes it: by a later one the path may be another listener's.
func (l *Listener) Close() error {
	if err := l.UnixListener.Close(); err != nil {
		return err
	}
	if err := os.Remove(l.path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove socket %s: %w", l.path, err)
	}
	return nil
}
