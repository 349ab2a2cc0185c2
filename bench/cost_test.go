package bench

import (
	"errors"
	"testing"
)

// A callgrind_control failure of an agent that has exited is an *agentGone, which
// measureRetried tries again (ran says whether the call ran before); one of an agent
// still running is the failure itself, which ends P10.
func TestCallgrindControlFailureOfAGoneAgent(t *testing.T) {
	failed := errors.New("callgrind_control -z: exit status 1")
	exited := make(chan struct{})
	close(exited)
	v := &costVariant{agent: &agentProc{exited: exited}}
	for _, ran := range []bool{false, true} {
		var gone *agentGone
		if err := v.goneOr(failed, ran); !errors.As(err, &gone) || gone.ran != ran || !errors.Is(gone.err, failed) {
			t.Errorf("ran %v: %v, want an *agentGone with ran %v wrapping the failure", ran, err, ran)
		}
	}
	v.agent.exited = make(chan struct{}) // still running
	var gone *agentGone
	if err := v.goneOr(failed, true); errors.As(err, &gone) || !errors.Is(err, failed) {
		t.Errorf("agent running: %v, want the failure itself", err)
	}
}
