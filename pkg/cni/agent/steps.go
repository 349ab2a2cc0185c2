package agent

import (
	"bytes"
	"errors"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
	"github.com/devplumb/devplumb/pkg/cni/shape"
)

func (a *Agent) prepareAdd(pl *plugin.Plugin, args *skel.CmdArgs, looked *plugin.Ahead) (*agentproto.PrepareAnswer, error) {
	prep, err := pl.PrepareAddAhead(args, looked)
	if err != nil {
		return &agentproto.PrepareAnswer{Error: cniError(err)}, nil
	}
	if prep.Delegate == nil { // a repeated ADD, answered already
		out, err := printed(prep.Replayed)
		if err != nil {
			return &agentproto.PrepareAnswer{Error: cniError(err)}, nil
		}
		return &agentproto.PrepareAnswer{Result: out}, nil
	}
	id, err := a.pending.put(&entry{add: prep})
	if err != nil {
		prep.Close() // as a crash after the take: the fallback's ADD repairs it
		return nil, err
	}
	return &agentproto.PrepareAnswer{Attachment: id, Delegate: wireDelegate(prep.Delegate)}, nil
}

func (a *Agent) prepareDel(pl *plugin.Plugin, args *skel.CmdArgs) (*agentproto.PrepareAnswer, error) {
	prep, err := pl.PrepareDel(args)
	switch {
	case err != nil:
		return &agentproto.PrepareAnswer{Error: cniError(err)}, nil
	case prep == nil: // nothing to undo at all
		return &agentproto.PrepareAnswer{}, nil
	case prep.Delegate == nil: // no delegate DEL may run: commit at once
		if err := prep.CommitDel(nil); err != nil {
			return &agentproto.PrepareAnswer{Error: cniError(err)}, nil
		}
		return &agentproto.PrepareAnswer{}, nil
	}
	id, err := a.pending.put(&entry{del: prep})
	if err != nil {
		prep.Close() // nothing changed yet: the fallback's DEL does it all
		return nil, err
	}
	return &agentproto.PrepareAnswer{Attachment: id, Delegate: wireDelegate(prep.Delegate)}, nil
}

// commitAdd finishes a prepared ADD. A commit failing after the delegates
// succeeded keeps the call pending under its id for the Rollback that
// follows the entry point's undo.
func (a *Agent) commitAdd(id string, e *entry, raw []byte, delegateErr error) *agentproto.CommitAnswer {
	var result types.Result
	if delegateErr == nil && len(raw) > 0 {
		// A result that does not parse is no result: CommitAdd asks for
		// the undo of delegates that succeeded without one.
		r, err := create.CreateFromBytes(raw)
		if err != nil {
			a.log.Warn("the delegates' ADD result does not parse", "attachment", e.add.Key, "err", err)
		}
		result = r
	}
	_, err := e.add.CommitAdd(result, delegateErr)
	if e.add.UndoPending() {
		if perr := a.pending.putBack(id, e); perr != nil {
			// No room to wait for the undo: the record stays in progress
			// for the runtime's DEL, the next ADD or gc.
			e.add.Close()
			return &agentproto.CommitAnswer{Error: cniError(err)}
		}
		return &agentproto.CommitAnswer{Error: cniError(err), Undo: true}
	}
	if err != nil {
		return &agentproto.CommitAnswer{Error: cniError(err)}
	}
	printedOut, err := e.add.Printed()
	if err != nil {
		return &agentproto.CommitAnswer{Error: cniError(err)}
	}
	return &agentproto.CommitAnswer{Result: printedOut}
}

func commitDel(d *plugin.PreparedDel, delegateErr error) *agentproto.CommitAnswer {
	if err := d.CommitDel(delegateErr); err != nil {
		return &agentproto.CommitAnswer{Error: cniError(err)}
	}
	return &agentproto.CommitAnswer{}
}

// wireDelegate is the delegates' run as the entry point gets it.
func wireDelegate(d *plugin.Delegate) *agentproto.Delegate {
	rt := d.Runtime
	return &agentproto.Delegate{
		ConfList:       d.ConfList,
		CapabilityArgs: rt.CapabilityArgs,
		Runtime:        &agentproto.Runtime{ContainerID: rt.ContainerID, NetNS: rt.NetNS, IfName: rt.IfName, Args: rt.Args},
		CacheDir:       d.CacheDir,
		Shape:          wireShape(d.Shape),
	}
}

// wireShape is a share's shaping as the entry point gets it.
func wireShape(s *shape.Spec) *agentproto.Shape {
	if s == nil {
		return nil
	}
	return &agentproto.Shape{Share: s.Share, Rate: s.Rate}
}

// cniError is err as the runtime sees it, as skel prints a plugin's error.
func cniError(err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	return types.NewError(types.ErrInternal, err.Error(), "")
}

// printed is a result's JSON as devplumb-direct prints it.
func printed(raw []byte) ([]byte, error) {
	r, err := create.CreateFromBytes(raw)
	if err != nil {
		return nil, types.NewError(types.ErrInternal, "cannot read the recorded result", err.Error())
	}
	return printedResult(r)
}

func printedResult(r types.Result) ([]byte, error) {
	var buf bytes.Buffer
	if err := r.PrintTo(&buf); err != nil {
		return nil, types.NewError(types.ErrInternal, "cannot encode the result", err.Error())
	}
	return buf.Bytes(), nil
}
