package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// defaultStateDir is pkg/cni/config's DefaultStateDir (main_test.go keeps
// them equal): where devplumb keeps its records and the delegates' libcni
// cache when the config names no stateDir.
const defaultStateDir = "/var/lib/cni/devplumb"

// runDelegates runs the delegates' cmd in this process, so they keep the
// runtime's environment, netns and timeout (unlike a daemon running them),
// with CNI_PATH as the runtime gave it. It returns the ADD's result as JSON,
// or the delegates' error as Commit carries it. A failed ADD is undone here
// (its DEL run) before the agent hears of it: whoever runs a delegate ADD
// runs the DEL undoing it, before the device can be freed.
func runDelegates(ctx context.Context, cmd string, args *skel.CmdArgs, d *agentproto.Delegate) ([]byte, *types.Error) {
	list, err := libcni.NetworkConfFromBytes(d.ConfList)
	if err != nil {
		return nil, cniError(fmt.Errorf("the agent's delegate config: %w", err))
	}
	cacheDir, err := libcniCacheDir(args.StdinData)
	if err != nil {
		return nil, cniError(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(args.Path), cacheDir, nil)
	rt := &libcni.RuntimeConf{ContainerID: args.ContainerID, NetNS: args.Netns, IfName: args.IfName,
		Args: parseArgs(args.Args), CapabilityArgs: d.CapabilityArgs}
	switch cmd {
	case agentproto.CmdAdd:
		return addDelegates(ctx, cni, cacheDir, list, rt)
	case agentproto.CmdDel:
		err = cni.DelNetworkList(ctx, list, rt)
	default:
		err = cni.CheckNetworkList(ctx, list, rt)
	}
	if err != nil {
		return nil, cniError(err)
	}
	return nil, nil
}

// addDelegates runs the ADD, and its DEL when it fails.
func addDelegates(ctx context.Context, cni *libcni.CNIConfig, cacheDir string, list *libcni.NetworkConfigList,
	rt *libcni.RuntimeConf) ([]byte, *types.Error) {
	unlock, err := lockCacheShared(cacheDir)
	if err != nil {
		return nil, cniError(err)
	}
	result, err := cni.AddNetworkList(ctx, list, rt)
	unlock()
	if err != nil {
		if derr := cni.DelNetworkList(ctx, list, rt); derr != nil {
			// The ADD's error is what the runtime must see; what the DEL
			// left is gc's.
			fmt.Fprintf(os.Stderr, "devplumb: undoing the failed delegate ADD: %v\n", derr)
		}
		return nil, cniError(err)
	}
	out, err := json.Marshal(result)
	if err != nil {
		return nil, cniError(fmt.Errorf("encode the delegates' result: %w", err))
	}
	return out, nil
}

// libcniCacheDir is pkg/cni/delegate's CacheDir of the call's network,
// <stateDir>/libcni/<name>: DEL, CHECK and GC of either path (agent or
// devplumb-direct) find the delegates' results there. agentproto.Delegate
// does not carry it yet, so it is read from the config the agent accepted.
func libcniCacheDir(stdin []byte) (string, error) {
	var conf struct {
		Name     string `json:"name"`
		StateDir string `json:"stateDir"`
	}
	if err := json.Unmarshal(stdin, &conf); err != nil || conf.Name == "" {
		return "", fmt.Errorf("the network config has no network name for the delegates' cache (%v)", err)
	}
	if conf.StateDir == "" {
		conf.StateDir = defaultStateDir
	}
	return filepath.Join(conf.StateDir, "libcni", conf.Name), nil
}

// lockCacheShared holds pkg/cni/delegate's cache lock (<cacheDir>/../.lock)
// shared while an ADD may create the cache: a concurrent DEL prunes empty
// cache directories only under it, exclusively.
func lockCacheShared(cacheDir string) (unlock func(), err error) {
	parent := filepath.Dir(cacheDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("libcni cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(parent, ".lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("libcni cache lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("libcni cache lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// parseArgs splits CNI_ARGS ("K=V;K2=V2") into libcni's pairs unchanged, as
// pkg/cni/delegate's ParseArgs: the delegates see what the runtime passed.
func parseArgs(s string) [][2]string {
	var out [][2]string
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, [2]string{k, v})
	}
	return out
}
