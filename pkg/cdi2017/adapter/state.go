package adapter

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/devplumb/devplumb/pkg/base/atomicfile"
)

// allocation is one ADD: one container's allocation of a resource.
type allocation struct {
	// Slots are the device IDs the kubelet allocated (the adapter's slots).
	Slots []string `json:"slots"`
	// Devices are the host device nodes the binary handed out; nil while
	// the ADD runs (a record left so by a crash is DELeted at start).
	Devices []string `json:"devices"`
	// Seen: PodResources has shown the slots on a pod. Until then the
	// kubelet may not have recorded the allocation yet.
	Seen    bool      `json:"seen"`
	Created time.Time `json:"created"`
}

// stateFile holds a resource's allocations by request ID, written
// atomically after every change, so a restarted adapter knows what to DEL.
type stateFile struct {
	path string
}

type stateJSON struct {
	Allocations map[string]*allocation `json:"allocations"`
}

func (s stateFile) load() (map[string]*allocation, error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]*allocation{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("adapter state: %w", err)
	}
	var st stateJSON
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("adapter state %s is corrupt: %w", s.path, err)
	}
	if st.Allocations == nil {
		st.Allocations = map[string]*allocation{}
	}
	return st.Allocations, nil
}

func (s stateFile) save(allocs map[string]*allocation) error {
	data, err := json.MarshalIndent(stateJSON{Allocations: allocs}, "", "  ")
	if err != nil {
		return fmt.Errorf("adapter state: encode: %w", err)
	}
	if err := atomicfile.WriteFile(s.path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("adapter state: %w", err)
	}
	return nil
}

// statePath is the state file of a resource-type in dir.
func statePath(dir, typ string) string { return filepath.Join(dir, typ+".json") }
