package devnodes

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/devplumb/devplumb/pkg/base/atomicfile"
	"golang.org/x/sys/unix"
)

// State is the state file: which request ID holds which nodes.
type State struct {
	Requests map[string]Claim `json:"requests"`
}

// Claim is what one request ID holds.
type Claim struct {
	Devices []string `json:"devices"`
}

// StatePath is the state file of a resource-type in stateDir.
func StatePath(stateDir, typ string) string { return filepath.Join(stateDir, typ+".json") }

// claimed is the set of nodes some request holds.
func (s *State) claimed() map[string]string {
	out := map[string]string{}
	for id, c := range s.Requests {
		for _, d := range c.Devices {
			out[d] = id
		}
	}
	return out
}

// withState runs f on the state under an exclusive lock; when f reports a
// change, the state is written atomically before the lock is released. The
// kernel drops the lock of a process that dies, so a crash never blocks
// later calls.
func withState(stateDir, typ string, f func(*State) (changed bool, err error)) error {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return errorf(CodeState, "State unavailable", "state dir: %v", err)
	}
	path := StatePath(stateDir, typ)
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return errorf(CodeState, "State unavailable", "lock file: %v", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return errorf(CodeState, "State unavailable", "lock %s: %v", lock.Name(), err)
	}
	st, err := readState(path)
	if err != nil {
		return err
	}
	changed, err := f(st)
	if err != nil || !changed {
		return err
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return errorf(CodeState, "State unavailable", "encode state: %v", err)
	}
	if err := atomicfile.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return errorf(CodeState, "State unavailable", "%v", err)
	}
	return nil
}

// readState reads the state file; a missing one is empty state.
func readState(path string) (*State, error) {
	st := &State{Requests: map[string]Claim{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, errorf(CodeState, "State unavailable", "read %s: %v", path, err)
	}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, errorf(CodeState, "State unavailable", "state file %s is corrupt: %v", path, err)
	}
	if st.Requests == nil {
		st.Requests = map[string]Claim{}
	}
	return st, nil
}

// ReadState reads the state of a resource-type without locking, for
// inspection and tests: the file is written atomically.
func ReadState(stateDir, typ string) (*State, error) {
	st, err := readState(StatePath(stateDir, typ))
	if err != nil {
		return nil, fmt.Errorf("cdi-devnodes state: %w", err)
	}
	return st, nil
}
