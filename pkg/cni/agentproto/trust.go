package agentproto

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
)

// checkSocketDir refuses an agent socket in a directory anyone but root
// could have put it in: a process that may write the directory may replace
// the socket by its own and answer the entry point (root, every capability)
// delegates to run. A sticky directory (/tmp) is refused too: it keeps
// others from removing root's socket, not from binding theirs first.
func checkSocketDir(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		// No directory is no socket: a node without the agent.
		return unavailable("no agent socket at %s: %w", path, err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return unavailable("agent socket directory %s is not a directory", dir)
	case !ok || sys.Uid != 0:
		return unavailable("agent socket directory %s is not root's (owner uid %d): not trusting the socket in it", dir, sysUID(sys))
	case st.Mode().Perm()&0o022 != 0:
		return unavailable("agent socket directory %s is writable by group or others (mode %v): not trusting the socket in it",
			dir, st.Mode()&(fs.ModePerm|fs.ModeSticky))
	}
	return nil
}

func sysUID(sys *syscall.Stat_t) int64 {
	if sys == nil {
		return -1
	}
	return int64(sys.Uid)
}

// checkPeerRoot refuses an agent that is not root, whatever the socket's
// directory says: the kernel's record of who listens (SO_PEERCRED) is what
// the listener cannot lie about.
func checkPeerRoot(c net.Conn, path string) error {
	cred, err := peerCred(c)
	if err != nil {
		return unavailable("agent on %s: %w", path, err)
	}
	if cred.Uid != 0 {
		return unavailable("the process listening on %s runs as uid %d (pid %d), not root: not an agent to trust",
			path, cred.Uid, cred.Pid)
	}
	return nil
}
