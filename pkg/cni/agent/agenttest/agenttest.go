// Package agenttest plays the CNI entry point's part of a call through the
// node agent, for tests of the agent (pkg/cni/agent, e2e): hello, prepare,
// the delegates run in the test process with libcni, commit, and the undo
// and rollback when the commit asks for them, as agentproto's package
// comment says the entry point must.
package agenttest

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// Outcome is what one call through the agent came to.
type Outcome struct {
	Prepared   *agentproto.PrepareAnswer
	Committed  *agentproto.CommitAnswer
	RolledBack *agentproto.RollbackAnswer
	// Err is an agent error: the entry point would exec devplumb-direct.
	Err error
}

// Call is one CNI call through the agent on socket. A failed delegate ADD is
// undone at once, before its commit.
func Call(t testing.TB, socket string, p *agentproto.Prepare) Outcome {
	t.Helper()
	dial := func() (*agentproto.Client, error) { return agentproto.Dial(socket, 5*time.Second, "agenttest") }
	if p.Command == agentproto.CmdAdd { // the hello carries the prepare's lookahead, as the entry point's
		dial = func() (*agentproto.Client, error) { return agentproto.DialAdd(socket, 5*time.Second, "agenttest", p) }
	}
	c, err := dial()
	if err != nil {
		return Outcome{Err: err}
	}
	defer c.Close()
	ctx := context.Background()
	var o Outcome
	if o.Prepared, o.Err = c.Prepare(ctx, p); o.Err != nil || o.Prepared.Delegate == nil {
		return o
	}
	d := o.Prepared.Delegate
	add := p.Command == agentproto.CmdAdd
	result, derr := Run(d, p.Path, add)
	if derr != nil && add {
		if _, err := Run(d, p.Path, false); err != nil {
			t.Errorf("undo of the failed delegate ADD: %v", err)
		}
	}
	cm := &agentproto.Commit{Attachment: o.Prepared.Attachment}
	cm.Result, cm.Error = Report(t, result, derr)
	if o.Committed, o.Err = c.Commit(ctx, cm); o.Err != nil || !o.Committed.Undo {
		return o
	}
	rb := &agentproto.Rollback{Attachment: o.Prepared.Attachment}
	if _, err := Run(d, p.Path, false); err != nil {
		rb.Error = CNIError(err)
	}
	o.RolledBack, o.Err = c.Rollback(ctx, rb)
	return o
}

// Run is the delegates' ADD or DEL through libcni as the agent describes the
// run, with the plugins on cniPath.
func Run(d *agentproto.Delegate, cniPath string, add bool) (types.Result, error) {
	list, err := libcni.NetworkConfFromBytes(d.ConfList)
	if err != nil {
		return nil, err
	}
	rt := &libcni.RuntimeConf{ContainerID: d.Runtime.ContainerID, NetNS: d.Runtime.NetNS, IfName: d.Runtime.IfName,
		Args: d.Runtime.Args, CapabilityArgs: d.CapabilityArgs, CacheDir: d.CacheDir}
	cni := libcni.NewCNIConfig(filepath.SplitList(cniPath), nil)
	if add {
		return cni.AddNetworkList(context.Background(), list, rt)
	}
	return nil, cni.DelNetworkList(context.Background(), list, rt)
}

// Report is the delegates' outcome as Commit carries it.
func Report(t testing.TB, result types.Result, err error) ([]byte, *types.Error) {
	t.Helper()
	if err != nil {
		return nil, CNIError(err)
	}
	if result == nil {
		return nil, nil
	}
	raw, err := json.Marshal(result)
	if err != nil {
		t.Fatal(err)
	}
	return raw, nil
}

// CNIError is err as a CNI error: its own, or code 999 with its text.
func CNIError(err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	return types.NewError(types.ErrInternal, err.Error(), "")
}
