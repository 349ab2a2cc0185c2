// Package libcnicache is what the CNI entry point (cmd/devplumb) and
// pkg/cni/delegate share about running delegates through libcni, so both
// run them alike without the entry point linking the plugin: the runtime's
// CNI_ARGS as libcni's pairs, and the lock on libcni's result cache.
// It imports the standard library and x/sys/unix only.
package libcnicache

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Lock takes the lock of every network's cache below the same parent
// (<cacheDir>/../.lock): shared while an ADD may create the cache,
// exclusive (never waiting) to prune empty cache directories. It is one
// file for all networks, so pruning leaves nothing per network behind.
func Lock(cacheDir string, exclusive bool) (unlock func(), err error) {
	parent := filepath.Dir(cacheDir)
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

// SplitArgs splits CNI_ARGS ("K=V;K2=V2") into libcni's pairs, unchanged,
// so delegates see what the runtime passed (IgnoreUnknown included).
func SplitArgs(s string) [][2]string {
	var out [][2]string
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, [2]string{k, v})
	}
	return out
}
