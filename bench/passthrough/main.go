// Command passthrough is make bench's reference meta-plugin: it runs the
// delegate its config names with libcni, in its own process, and prints the
// result, and does nothing else. P1's row for it is the least a CNI
// meta-plugin written in Go costs on the machine (its process start, the CNI
// library's initialisers, libcni's cache): what devplumb's entry point pays
// before it asks the agent anything.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// conf is the pass-through's network config: the delegate to run, the
// directory of its libcni cache, and whether to run with one P (as
// devplumb's entry point does), which P1 shows for comparison.
type conf struct {
	types.NetConf
	Delegate map[string]any `json:"delegate"`
	CacheDir string         `json:"cacheDir"`
	OneP     bool           `json:"oneP,omitempty"`
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add: func(a *skel.CmdArgs) error { return run(a, true) },
		Del: func(a *skel.CmdArgs) error { return run(a, false) },
	}, version.All, "passthrough: make bench's reference meta-plugin")
}

func run(args *skel.CmdArgs, add bool) error {
	var c conf
	if err := json.Unmarshal(args.StdinData, &c); err != nil {
		return fmt.Errorf("passthrough config: %w", err)
	}
	if c.OneP {
		runtime.GOMAXPROCS(1)
	}
	raw, err := json.Marshal(map[string]any{"cniVersion": c.CNIVersion, "name": c.Name, "plugins": []any{c.Delegate}})
	if err != nil {
		return err
	}
	list, err := libcni.NetworkConfFromBytes(raw)
	if err != nil {
		return fmt.Errorf("passthrough delegate: %w", err)
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(args.Path), c.CacheDir, nil)
	rt := &libcni.RuntimeConf{ContainerID: args.ContainerID, NetNS: args.Netns, IfName: args.IfName}
	if !add {
		return cni.DelNetworkList(context.Background(), list, rt)
	}
	result, err := cni.AddNetworkList(context.Background(), list, rt)
	if err != nil {
		return err
	}
	return result.Print()
}
