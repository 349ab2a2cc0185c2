package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// checkDelegate refuses a delegate run that is not this call's. The entry
// point runs what the agent answers as root with every capability, so the
// parts that say where it acts must be what the call itself names: the
// libcni cache of its network under the node's state directory (another
// would let the agent point a DEL at another network's results, or have
// libcni write elsewhere), and the runtime's container, interface and
// netns (empty: a DEL of a gone netns). A mismatch is the agent lying or
// broken: a CNI error, with no fallback, since devplumb-direct would run
// the same call against the same records.
func checkDelegate(node *nodeconfig.Node, args *skel.CmdArgs, d *agentproto.Delegate) error {
	name, err := networkName(args.StdinData)
	if err != nil {
		return &types.Error{Code: types.ErrInvalidNetworkConfig, Msg: err.Error()}
	}
	var bad []string
	if want := node.CacheDir(name); d.CacheDir != want {
		bad = append(bad, fmt.Sprintf("cacheDir %q, the call's is %q", d.CacheDir, want))
	}
	if r := d.Runtime; r != nil {
		if r.ContainerID != args.ContainerID {
			bad = append(bad, fmt.Sprintf("containerID %q, the call's is %q", r.ContainerID, args.ContainerID))
		}
		if r.IfName != args.IfName {
			bad = append(bad, fmt.Sprintf("ifName %q, the call's is %q", r.IfName, args.IfName))
		}
		if r.NetNS != "" && r.NetNS != args.Netns {
			bad = append(bad, fmt.Sprintf("netns %q, the call's is %q", r.NetNS, args.Netns))
		}
	}
	if len(bad) > 0 {
		return &types.Error{Code: types.ErrInternal,
			Msg: "the devplumb agent answered a delegate run that is not this call's: " + strings.Join(bad, "; ") + "; not running it"}
	}
	return nil
}

// networkName is the "name" of the call's network config: its delegates'
// libcni cache is the network's own.
func networkName(stdin []byte) (string, error) {
	var conf struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil || conf.Name == "" {
		return "", fmt.Errorf("the network config has no network name for the delegates' cache (%v)", err)
	}
	return conf.Name, nil
}
