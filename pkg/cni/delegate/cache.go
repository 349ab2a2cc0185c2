package delegate

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/devplumb/devplumb/pkg/base/libcnicache"
)

// pruneCache removes the network's results directory and the network's
// cache directory when they are empty (every DEL would otherwise leave one
// per network). While any ADD runs it does nothing: that ADD may be about
// to write into them, and a later DEL prunes.
func (i *Invoker) pruneCache() {
	unlock, err := libcnicache.Lock(i.cacheDir, true)
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
