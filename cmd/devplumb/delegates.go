package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/base/libcnicache"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/shape"
)

// delegateRun is the delegate list the agent answered, as libcni runs it in
// this process, so the delegates keep the runtime's environment, netns and
// timeout (unlike a daemon running them), with CNI_PATH as the runtime gave
// it.
type delegateRun struct {
	cni      *libcni.CNIConfig
	list     *libcni.NetworkConfigList
	rt       *libcni.RuntimeConf
	cacheDir string
	shape    *agentproto.Shape // a share's rate, set once the ADD succeeded
}

// newDelegateRun reads the answered run (checkDelegate accepted it): the
// agent's runtime arguments when it sends them (a DEL of a gone netns runs
// with none), else this call's, and its cache directory.
func newDelegateRun(args *skel.CmdArgs, d *agentproto.Delegate) (*delegateRun, error) {
	list, err := libcni.NetworkConfFromBytes(d.ConfList)
	if err != nil {
		return nil, fmt.Errorf("the agent's delegate config: %w", err)
	}
	cacheDir := d.CacheDir
	rt := &libcni.RuntimeConf{ContainerID: args.ContainerID, NetNS: args.Netns, IfName: args.IfName,
		Args: libcnicache.SplitArgs(args.Args)}
	if r := d.Runtime; r != nil {
		rt = &libcni.RuntimeConf{ContainerID: r.ContainerID, NetNS: r.NetNS, IfName: r.IfName, Args: r.Args}
	}
	rt.CapabilityArgs = d.CapabilityArgs
	return &delegateRun{cni: libcni.NewCNIConfigWithCacheDir(filepath.SplitList(args.Path), cacheDir, nil),
		list: list, rt: rt, cacheDir: cacheDir, shape: d.Shape}, nil
}

// run runs cmd and returns an ADD's result as JSON, or the delegates' error
// as Commit carries it. A failed ADD is undone here (its DEL run) before the
// agent hears of it: whoever runs a delegate ADD runs the DEL undoing it,
// before the device can be freed.
func (r *delegateRun) run(ctx context.Context, cmd string) ([]byte, *types.Error) {
	var err error
	switch cmd {
	case agentproto.CmdAdd:
		return r.add(ctx)
	case agentproto.CmdDel:
		err = r.del(ctx)
	default:
		err = r.cni.CheckNetworkList(ctx, r.list, r.rt)
	}
	if err != nil {
		return nil, cniError(err)
	}
	return nil, nil
}

// add runs the ADD, and its DEL when it fails.
func (r *delegateRun) add(ctx context.Context) ([]byte, *types.Error) {
	unlock, err := libcnicache.Lock(r.cacheDir, false)
	if err != nil {
		return nil, cniError(err)
	}
	result, err := r.cni.AddNetworkList(ctx, r.list, r.rt)
	unlock()
	if err == nil {
		err = r.shapeShare()
	}
	if err != nil {
		if derr := r.del(ctx); derr != nil {
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

// del runs the delegates' DEL: a DEL's own run, or the undo of an ADD.
func (r *delegateRun) del(ctx context.Context) error {
	err := r.cni.DelNetworkList(ctx, r.list, r.rt)
	if r.shape != nil {
		// The share's ifb: the interface and its qdiscs went with the
		// delegates' DEL. One left stays with the pod's netns, which a
		// later ADD of the interface replaces: not DEL's error.
		if rerr := shape.Remove(r.rt.NetNS, r.rt.IfName); rerr != nil {
			fmt.Fprintf(os.Stderr, "devplumb: %s: %v\n", r.shape.Share, rerr)
		}
	}
	return err
}

// shapeErrCode is pkg/cni/plugin's ErrShape (main_test.go keeps them equal):
// the agent's commit reports a shaping error as it is.
const shapeErrCode = 108

// shapeShare sets a share's rate on its interface, as devplumb-direct does
// after the delegates' ADD (pkg/cni/shape); its error is undone as a
// failed ADD's.
func (r *delegateRun) shapeShare() error {
	if r.shape == nil {
		return nil
	}
	if err := shape.Apply(r.rt.NetNS, r.rt.IfName, shape.Spec{Share: r.shape.Share, Rate: r.shape.Rate}); err != nil {
		return &types.Error{Code: shapeErrCode, Msg: err.Error()}
	}
	return nil
}
