package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
)

// DepthEnv counts how many devplumb runs are above this one: each sets it
// one higher for its delegates. devplumb under devplumb (a copy under
// another name that the same-binary check cannot see, or devplumb as a
// delegate's IPAM plugin) would recurse: each ADD undoes the previous one by
// running the recorded delegate's DEL, which is devplumb again, until the
// process table is full.
const DepthEnv = "DEVPLUMB_DEPTH"

// maxDepth is how deep devplumb may run: devplumb never delegates to
// devplumb, so one level (the runtime's, or Multus's, call) is all there is.
const maxDepth = 1

// ErrSelfDelegation is matched (errors.Is) by selfCheck's errors.
var ErrSelfDelegation = errors.New("devplumb cannot delegate to itself")

// inheritedDepth is this process's depth, as its parent set it (read once:
// markDepth changes the environment for the delegates).
var inheritedDepth = depth()

// depth is the depth in the environment: 0 for a run no devplumb started.
func depth() int {
	n, err := strconv.Atoi(os.Getenv(DepthEnv))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// markDepth sets the depth the delegates of this process will see (libcni
// passes the process environment on to plugins) and returns this one's.
func markDepth() int {
	_ = os.Setenv(DepthEnv, strconv.Itoa(inheritedDepth+1))
	return inheritedDepth
}

// delegatesSafe is selfCheck for this call's delegates.
func (c *call) delegatesSafe(list *libcni.NetworkConfigList) error {
	exe, _ := os.Executable()
	return selfCheck(c.args.Path, list, c.depth, selfFiles(exe))
}

// tooDeep refuses a run that another devplumb started, before its input
// is even read (as a delegate's IPAM plugin, devplumb gets a config not its
// own).
func tooDeep() error {
	if inheritedDepth >= maxDepth {
		return fmt.Errorf("%w: a devplumb run started this one (%s=%d): a delegate, or a delegate's IPAM plugin, is devplumb",
			ErrSelfDelegation, DepthEnv, inheritedDepth)
	}
	return nil
}

// selfCheck refuses a delegate list that would run devplumb: too deep a
// run already, or a plugin (or its IPAM plugin) whose binary, found in
// cniPath as libcni finds it, is the very file this process runs (so a
// link or hard link to devplumb under another name is caught, whatever its
// type string).
func selfCheck(cniPath string, list *libcni.NetworkConfigList, d int, selves []os.FileInfo) error {
	if d >= maxDepth {
		return fmt.Errorf("%w: it runs %d deep already (%s=%d): a delegate, or a delegate's IPAM plugin, is devplumb",
			ErrSelfDelegation, d, DepthEnv, d)
	}
	if len(selves) == 0 {
		return nil // nothing to compare with; the depth bound still holds
	}
	paths := filepath.SplitList(cniPath)
	for _, p := range list.Plugins {
		for _, typ := range []string{p.Network.Type, p.Network.IPAM.Type} {
			if typ == "" {
				continue
			}
			bin, err := invoke.FindInPath(typ, paths)
			if err != nil {
				continue // libcni reports a missing plugin itself
			}
			st, err := os.Stat(bin)
			if err != nil {
				continue
			}
			for _, self := range selves {
				if os.SameFile(st, self) {
					return fmt.Errorf("%w: plugin type %q is %s, which is this devplumb binary or its entry point", ErrSelfDelegation, typ, bin)
				}
			}
		}
	}
	return nil
}

// entryPoint is the name of the CNI entry point installed beside
// devplumb-direct: the binary the configs name "devplumb".
const entryPoint = "devplumb"

// selfFiles are the files a process running exe runs as: exe and the entry
// point beside it, which runs it (a delegate that is either one is devplumb).
func selfFiles(exe string) []os.FileInfo {
	var out []os.FileInfo
	for _, f := range []string{exe, filepath.Join(filepath.Dir(exe), entryPoint)} {
		if st, err := os.Stat(f); err == nil && exe != "" {
			out = append(out, st)
		}
	}
	return out
}
