// Package devnodes is the reference plugin of the 2017 CDI draft (the
// draft's generic example made real): it hands out the device nodes that
// match a glob, keeps the first num_system_reserved of them for the system,
// and records which request ID holds which nodes in a state file that is
// locked (flock) for every change and written atomically, so concurrent
// calls never hand out one node twice and a crash leaves either the whole
// claim or none of it.
package devnodes

import (
	"bytes"
	"encoding/json"
	"path/filepath"

	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
)

// Defaults of the config's args.
const (
	DefaultStateDir  = "/var/lib/cdi/cdi-devnodes"
	DefaultSysfsRoot = "/sys"
)

// Args are the config's args. Unknown keys are errors, so a typo fails loudly.
type Args struct {
	// Glob selects the device nodes; default /dev/<resource-type>[0-9]*.
	Glob string `json:"glob,omitempty"`
	// NumSystemReserved: the first this many matching nodes, in natural
	// order (tty2 before tty10), are never handed out.
	NumSystemReserved int `json:"num_system_reserved,omitempty"`
	// StateDir holds <resource-type>.json and its lock; default DefaultStateDir.
	StateDir string `json:"state_dir,omitempty"`
	// SysfsRoot is where sysfs is mounted, for NUMA locality; default /sys.
	SysfsRoot string `json:"sysfs_root,omitempty"`
}

// parseArgs reads and checks the args of cfg, filling in defaults.
func parseArgs(cfg *protocol.Config) (*Args, error) {
	var a Args
	if len(cfg.Args) > 0 {
		dec := json.NewDecoder(bytes.NewReader(cfg.Args))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil {
			return nil, protocol.NewError(protocol.ErrCodeConfigVersion, "Invalid config", "args: %v", err)
		}
	}
	if a.Glob == "" {
		a.Glob = "/dev/" + cfg.Type + "[0-9]*"
	}
	if _, err := filepath.Match(a.Glob, ""); err != nil || !filepath.IsAbs(a.Glob) {
		return nil, protocol.NewError(protocol.ErrCodeConfigVersion, "Invalid config", "args.glob %q must be an absolute path pattern", a.Glob)
	}
	if a.NumSystemReserved < 0 {
		return nil, protocol.NewError(protocol.ErrCodeConfigVersion, "Invalid config", "args.num_system_reserved %d is negative", a.NumSystemReserved)
	}
	if a.StateDir == "" {
		a.StateDir = DefaultStateDir
	}
	if a.SysfsRoot == "" {
		a.SysfsRoot = DefaultSysfsRoot
	}
	if !filepath.IsAbs(a.StateDir) || !filepath.IsAbs(a.SysfsRoot) {
		return nil, protocol.NewError(protocol.ErrCodeConfigVersion, "Invalid config", "args.state_dir and args.sysfs_root must be absolute paths")
	}
	return &a, nil
}

// errorf makes one of this plugin's own errors.
func errorf(code int, msg, format string, args ...any) error {
	return protocol.NewError(code, msg, format, args...)
}

// This plugin's own error codes.
const (
	CodeNotEnough = 101 // fewer free nodes than requested
	CodeIDInUse   = 102 // the request ID already holds nodes
	CodeState     = 103 // the state file or its lock failed
)
