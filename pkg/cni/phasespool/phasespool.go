// Package phasespool is how devplumb's CNI calls hand their phase timings to
// Prometheus without linking it: devplumb runs once per call and cannot be scraped, so each ADD and DEL drops one small
// record of its phases into a spool directory below its state directory, and a node
// daemon (`devplumbctl metrics`, package phasemetrics) drains the spool into histograms. The spool exists only
// while a daemon runs: it creates the directory and removes it when it stops, so a node
// without the daemon pays one failed stat per call and keeps no files. A spool nobody
// drains stops growing at MaxSpooled records.
package phasespool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
)

// SpoolDir is the spool's directory below a devplumb state directory.
const SpoolDir = "phases"

// MaxSpooled bounds the records waiting in a spool: beyond it calls drop theirs.
const MaxSpooled = 1000

// MaxRecord bounds a record file the daemon reads; a real one is a few hundred bytes.
const MaxRecord = 64 << 10

// Record is one CNI call's timings.
type Record struct {
	Op      string             `json:"op"`      // ADD or DEL
	Network string             `json:"network"` // the config's name
	Failed  bool               `json:"failed"`  // the call returned an error
	Phases  []attachment.Phase `json:"phases"`
}

// Drop writes r into stateDir's spool when a daemon keeps one there. A missing spool
// is no error (no daemon runs); a full one drops r. The file appears whole (renamed
// into place) and is not synced: a record lost in a crash is a lost sample, no more.
func Drop(stateDir string, r Record) error {
	dir, err := safefile.CheckDirUnder(stateDir, SpoolDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("phase spool: %w", err)
	}
	if full(dir) {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("phase spool: %w", err)
	}
	name := strconv.FormatInt(time.Now().UnixNano(), 10) + "-" + strconv.Itoa(os.Getpid()) + ".json"
	tmp := filepath.Join(dir, "."+name)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("phase spool: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("phase spool: %w", err)
	}
	return nil
}

// full reports whether dir holds MaxSpooled entries already; it reads no further.
func full(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return true
	}
	defer f.Close()
	names, _ := f.Readdirnames(MaxSpooled)
	return len(names) >= MaxSpooled
}
