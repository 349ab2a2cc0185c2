// Command passthrough is make bench's reference meta-plugin: it runs the
// delegate its config names with libcni, in its own process, and prints the
// result, and does nothing else. P1's row for it is the least a CNI
// meta-plugin written in Go costs on the machine (its process start, the CNI
// library's initialisers, libcni's cache): what devplumb's entry point pays
// before it asks the agent anything. With "statusSocket" it also hands each
// call's outcome to make bench's status daemon, which writes the pod's
// network-status (an ADD's before it returns): the least a meta-plugin that
// writes network-status costs. With "agentSocket" it makes devplumb's entry
// point's round trips to make bench's agent that does nothing (agent.go): the
// least an agent-based meta-plugin costs.
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

	"github.com/devplumb/devplumb/bench/statuscall"
)

// conf is the pass-through's network config: the delegate to run, the
// directory of its libcni cache, whether to run with one P (as devplumb's
// entry point does), which P1 shows for comparison, and the status daemon's
// socket ("": none) with the DRA claim it writes too.
type conf struct {
	types.NetConf
	Delegate     map[string]any `json:"delegate"`
	CacheDir     string         `json:"cacheDir"`
	OneP         bool           `json:"oneP,omitempty"`
	StatusSocket string         `json:"statusSocket,omitempty"`
	// StatusClaim is the DRA claim the daemon also writes the status of.
	StatusClaim *statuscall.Claim `json:"statusClaim,omitempty"`
	// AgentSocket is make bench's agent that does nothing (agent.go; "": none).
	AgentSocket string `json:"agentSocket,omitempty"`
}

// podArgs are the pod's keys in CNI_ARGS, for the status daemon.
type podArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAME      types.UnmarshallableString //nolint:revive // CNI_ARGS key
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
	// delegate runs the delegate's ADD (its result) or DEL (none).
	delegate := func() (types.Result, error) {
		if !add {
			return nil, cni.DelNetworkList(context.Background(), list, rt)
		}
		return cni.AddNetworkList(context.Background(), list, rt)
	}
	if c.AgentSocket != "" {
		return viaAgent(c, args, add, delegate)
	}
	result, err := delegate()
	if err != nil {
		return err
	}
	if !add {
		return tell(c, args, nil)
	}
	out, err := json.Marshal(result)
	if err != nil {
		return err
	}
	if err := tell(c, args, out); err != nil {
		return err
	}
	return result.Print()
}

// tell hands the call's outcome (result: ADD's; nil for DEL) to the status
// daemon, when the config names one.
func tell(c conf, args *skel.CmdArgs, result []byte) error {
	if c.StatusSocket == "" {
		return nil
	}
	var pod podArgs
	if err := types.LoadArgs(args.Args, &pod); err != nil {
		return fmt.Errorf("passthrough CNI_ARGS: %w", err)
	}
	return statuscall.Ask(c.StatusSocket, statuscall.Call{Add: result != nil, Namespace: string(pod.K8S_POD_NAMESPACE),
		Pod: string(pod.K8S_POD_NAME), Network: c.Name, Result: result, Claim: c.StatusClaim})
}
