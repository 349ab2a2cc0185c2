package nodeconfig

import (
	"os"
	"sync"
	"syscall"
	"time"
)

// Cache is the node config of a process that serves many calls (the node
// agent): Load reads and decodes the file again only when it changed, where
// every call read it (four system calls and a strict decode, twice a pod).
//
// A change is told by the file's status, following links as Load does: a new
// file put in place (a ConfigMap's link swapped, a rename), or one written,
// chmodded or chowned in place, changes its inode, size, mtime or ctime. Two
// writes within one tick of the file system's clock can leave the same times,
// so a config whose file changed less than settle before it was read is not
// kept: a later write cannot then carry the times it was read with.
type Cache struct {
	settle time.Duration // 0: the const settle (tests shorten it)

	mu    sync.Mutex
	path  string
	stamp stamp
	node  *Node // nil: nothing kept
}

// settle is how long after its last change a file is read before its config
// is kept: far more than any file system's clock tick.
const settle = time.Second

// stamp is what tells a file from its changed self.
type stamp struct {
	dev, ino, size      uint64
	mtimeSec, mtimeNsec int64
	ctimeSec, ctimeNsec int64
}

// Load is the package's Load of path, the config kept from an earlier Load
// when the file has not changed since. The returned Node is the caller's.
func (c *Cache) Load(path string) (*Node, error) {
	st, kept := statStamp(path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if kept && c.node != nil && c.path == path && c.stamp == st.stamp {
		n := *c.node
		return &n, nil
	}
	c.node = nil
	n, err := Load(path)
	if err != nil {
		return nil, err
	}
	if kept && time.Since(st.changed) >= c.settled() {
		own := *n // the caller's copy stays the caller's
		c.path, c.stamp, c.node = path, st.stamp, &own
	}
	return n, nil
}

func (c *Cache) settled() time.Duration {
	if c.settle > 0 {
		return c.settle
	}
	return settle
}

type fileStatus struct {
	stamp
	changed time.Time // the later of mtime and ctime
}

// statStamp is path's status; false when it has none (missing: Load's
// defaults, not kept).
func statStamp(path string) (fileStatus, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStatus{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStatus{}, false
	}
	s := stamp{dev: uint64(st.Dev), ino: st.Ino, size: uint64(st.Size), //nolint:unconvert // Dev's type differs by arch
		mtimeSec: st.Mtim.Sec, mtimeNsec: st.Mtim.Nsec, ctimeSec: st.Ctim.Sec, ctimeNsec: st.Ctim.Nsec}
	changed := time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	if m := time.Unix(st.Mtim.Sec, st.Mtim.Nsec); m.After(changed) {
		changed = m
	}
	return fileStatus{stamp: s, changed: changed}, true
}
