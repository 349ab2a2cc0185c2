package delegate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockCache takes the lock of every network's cache below the same parent
// (stateDir/libcni/.lock): shared for an ADD, exclusive to prune. It is one
// file for all networks, so pruning leaves nothing per network behind.
func (i *Invoker) lockCache(exclusive bool) (unlock func(), err error) {
	parent := filepath.Dir(i.cacheDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("libcni cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(parent, ".lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("libcni cache lock: %w", err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX | unix.LOCK_NB
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("libcni cache lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// pruneCache removes the network's results directory and the network's
// cache directory when they are empty (every DEL would otherwise leave one
// per network). While any ADD runs it does nothing: that ADD may be about
// to write into them, and a later DEL prunes.
func (i *Invoker) pruneCache() {
	unlock, err := i.lockCache(true)
	if err != nil {
		return
	}
	defer unlock()
	for _, dir := range []string{filepath.Join(i.cacheDir, "results"), i.cacheDir} {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return // not empty: other attachments of the network
		}
	}
}
