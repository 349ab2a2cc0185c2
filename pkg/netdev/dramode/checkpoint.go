package dramode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/devplumb/devplumb/pkg/base/atomicfile"
	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// record is what the driver prepared for one claim. The kubelet unprepares
// with only the claim's UID, namespace and name, possibly after a restart of
// this driver, so each record is kept in a file (checkpoints) until then.
type record struct {
	UID       types.UID        `json:"uid"`
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []preparedDevice `json:"devices"`
}

// preparedDevice is one device of a prepared claim, with the description it
// had when prepared: its CDI spec entry and device-info file are rebuilt
// from it after a restart, also when its source no longer shows the device
// the same way (a netdev moved into the pod).
type preparedDevice struct {
	Requests []string      `json:"requests"`
	Pool     string        `json:"pool"`
	Name     string        `json:"name"` // the device's name in the slice
	Resource string        `json:"resource"`
	CDI      string        `json:"cdi"` // fully qualified CDI device name
	Device   source.Device `json:"device"`
	Share    *share        `json:"share,omitempty"` // set for a share of a shareable device
}

func (r *record) String() string { return fmt.Sprintf("%s/%s (%s)", r.Namespace, r.Name, r.UID) }

// checkpoints keeps one JSON file per prepared claim, named by its UID.
type checkpoints struct{ dir string }

// maxRecordSize bounds a record file: a claim holds at most a few dozen devices.
const maxRecordSize = 1 << 20

func (c checkpoints) path(uid types.UID) (string, error) {
	s := string(uid)
	if s == "" || strings.ContainsAny(s, `/\`) || s == "." || s == ".." || len(s) > 128 {
		return "", fmt.Errorf("claim UID %q cannot name a checkpoint file", s)
	}
	return filepath.Join(c.dir, s+".json"), nil
}

func (c checkpoints) save(r *record) error {
	p, err := c.path(r.UID)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpoint of claim %s: %w", r, err)
	}
	if err := atomicfile.WriteFile(p, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("checkpoint of claim %s: %w", r, err)
	}
	return nil
}

func (c checkpoints) remove(uid types.UID) error {
	p, err := c.path(uid)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove checkpoint of claim %s: %w", uid, err)
	}
	return nil
}

// load reads every record. A file that cannot be read is an error: the
// claims it holds would otherwise be prepared twice or never cleaned up.
func (c checkpoints) load() ([]*record, error) {
	entries, err := os.ReadDir(c.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoints: %w", err)
	}
	var out []*record
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue // atomicfile's temporary files start with "."
		}
		p := filepath.Join(c.dir, e.Name())
		data, err := safefile.ReadFile(p, maxRecordSize, safefile.NoFollow)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", p, err)
		}
		var r record
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", p, err)
		}
		if string(r.UID)+".json" != e.Name() {
			return nil, fmt.Errorf("checkpoint %s holds claim UID %q", p, r.UID)
		}
		out = append(out, &r)
	}
	return out, nil
}
