package kubeletsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/devplumb/devplumb/pkg/base/atomicfile"
)

const checkpointVersion = 1

// checkpoint is the file that lets assignments survive a restart, as the
// kubelet's kubelet_internal_checkpoint does.
type checkpoint struct {
	Version int              `json:"version"`
	Pods    []*PodAllocation `json:"pods"`
}

// CheckpointPath is where a node under root keeps its assignments.
func CheckpointPath(root string) string { return filepath.Join(StateDir(root), "checkpoint.json") }

func (n *Node) loadCheckpoint() error {
	path := CheckpointPath(n.root)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read checkpoint: %w", err)
	}
	var cp checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return fmt.Errorf("checkpoint %s is corrupt (remove it to start with no pods): %w", path, err)
	}
	if cp.Version != checkpointVersion {
		return fmt.Errorf("checkpoint %s has version %d, this nodesim reads version %d", path, cp.Version, checkpointVersion)
	}
	for i, p := range cp.Pods {
		if p == nil || p.Namespace == "" || p.Name == "" {
			return fmt.Errorf("checkpoint %s: pod entry %d has no namespace or name", path, i)
		}
	}
	n.pods = cp.Pods
	return nil
}

// saveCheckpointLocked writes all pods atomically; n.mu must be held.
func (n *Node) saveCheckpointLocked() error {
	pods := n.pods
	if pods == nil {
		pods = []*PodAllocation{}
	}
	data, err := json.MarshalIndent(checkpoint{Version: checkpointVersion, Pods: pods}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	if err := atomicfile.WriteFile(CheckpointPath(n.root), data, 0o600); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}
