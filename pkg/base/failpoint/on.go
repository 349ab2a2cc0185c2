//go:build failpoints

package failpoint

import (
	"os"
	"syscall"
)

// Enabled reports whether this build has failpoints.
const Enabled = true

// Hit kills the process with SIGKILL when Env names this step. SIGKILL, not
// an exit: no deferred cleanup and no signal handler may run, as in a crash.
func Hit(name string) {
	if os.Getenv(Env) != name {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
