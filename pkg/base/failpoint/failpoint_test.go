package failpoint

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// Hit kills the process at the named step only, and only in a failpoints
// build; in others it is a no-op.
func TestHit(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") != "" {
		Hit("other")
		Hit("step")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHit$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", Env+"=step")
	err := cmd.Run()
	var st syscall.WaitStatus
	if cmd.ProcessState != nil {
		st, _ = cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	killed := st.Signaled() && st.Signal() == syscall.SIGKILL
	if killed != Enabled {
		t.Errorf("failpoints build %v: child killed %v (%v)", Enabled, killed, err)
	}
}
