package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// entry is one CNI call of the entry point.
type entry struct {
	socket string // the agent's socket
	build  string // this binary's build, told to the agent in hello
}

// call does ADD, DEL or CHECK through the agent: prepare, the delegates run
// here, commit. An agent that is not there (no socket, nobody listening, not
// one to trust, another protocol version, lost mid-call) ends in
// devplumb-direct, which does the whole call from the records; an agent that
// answers is believed only as far as its answer names this call.
func (e *entry) call(cmd string, args *skel.CmdArgs) error {
	if depth() > 0 {
		return refuseDepth(cmd, args)
	}
	node := loadNode()
	ctx := context.Background() // the calls' own DefaultCallTimeout bounds them
	c, ans, err := e.prepare(ctx, cmd, args, node)
	if err != nil {
		return err
	}
	defer c.Close() // after a refused answer too: the agent drops what it prepared
	switch {
	case ans.Error != nil:
		return ans.Error // the agent judged the call: the runtime sees its error
	case len(ans.Result) > 0:
		return printResult(ans.Result) // a repeated ADD: the result it had
	case ans.Delegate == nil && cmd == agentproto.CmdAdd:
		// An ADD prints a result, and this answer has none to print:
		// devplumb-direct does the ADD (or replays it) from the record.
		return execDirect(args, errors.New("the agent answered an ADD with nothing to run or print"))
	case ans.Delegate == nil:
		return nil // a DEL or CHECK with nothing left to do
	}
	if err := checkDelegate(node.node, args, ans.Delegate); err != nil {
		return err // a lying agent: neither its delegates nor devplumb-direct run
	}
	return e.commit(ctx, c, cmd, args, ans)
}

// prepare reaches the agent and has it prepare the call: hello, then
// prepare, or both at once for a DEL (agentproto.DialDel says why only a
// DEL; an ADD's hello carries the prepare's lookahead). The node config
// loads meanwhile: an ADD's prepare waits for it, and without it (or without
// an agent) the call is devplumb-direct's. The error is what the call ends
// in: devplumb-direct's run, or a CNI error.
func (e *entry) prepare(ctx context.Context, cmd string, args *skel.CmdArgs,
	node *nodeLoad) (*agentproto.Client, *agentproto.PrepareAnswer, error) {
	if cmd == agentproto.CmdDel {
		c, ans, err := agentproto.DialDel(ctx, e.socket, dialBound, e.build, prepareOf(cmd, args))
		if err != nil {
			return nil, nil, agentFailed(args, err)
		}
		if err := node.wait(); err != nil {
			c.Close() // the DEL prepared changes nothing: closing drops it
			return nil, nil, execDirect(args, err)
		}
		return c, ans, nil
	}
	prep := prepareOf(cmd, args)
	c, err := e.dial(prep)
	if err != nil {
		// No agent, a silent one, an untrusted one, or another protocol version.
		return nil, nil, execDirect(args, err)
	}
	if err := node.wait(); err != nil {
		c.Close() // before the prepare, which takes a device
		return nil, nil, execDirect(args, err)
	}
	ans, err := c.Prepare(ctx, prep)
	if err != nil {
		// Lost before prepare answered: the agent may have claimed the
		// device, but nothing ran; devplumb-direct's ADD treats an
		// incomplete record as a crash after claim and does it afresh.
		c.Close()
		return nil, nil, agentFailed(args, err)
	}
	return c, ans, nil
}

// dial reaches the agent for an ADD or CHECK: an ADD's hello goes with its
// prepare's lookahead (agentproto.DialAdd), so the agent starts the pod's
// PodResources Get before the prepare comes.
func (e *entry) dial(prep *agentproto.Prepare) (*agentproto.Client, error) {
	if prep.Command == agentproto.CmdAdd {
		return agentproto.DialAdd(e.socket, dialBound, e.build, prep)
	}
	return agentproto.Dial(e.socket, dialBound, e.build)
}

// nodeLoad is the node config read in a goroutine of its own, which runs
// while the entry point waits for the agent's first answer (one P: it runs
// when the call blocks): a file read and decode taken off every call's path.
type nodeLoad struct {
	done chan struct{}
	node *nodeconfig.Node
	err  error
}

func loadNode() *nodeLoad {
	l := &nodeLoad{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.node, l.err = nodeconfig.Load(nodeconfig.Path())
	}()
	return l
}

// wait waits for the load: without the node's settings no answer can be
// checked; devplumb-direct reads them too and says what is wrong.
func (l *nodeLoad) wait() error {
	<-l.done
	return l.err
}

// agentFailed is what a failed round trip with the agent comes to: an agent
// that is not there (ErrUnavailable) is devplumb-direct's call; a config
// too large for the protocol is a CNI error, not a fallback, which would
// hand devplumb-direct what the agent could not take.
func agentFailed(args *skel.CmdArgs, err error) error {
	switch {
	case errors.Is(err, agentproto.ErrUnavailable):
		return execDirect(args, err)
	case errors.Is(err, agentproto.ErrTooLarge):
		return &types.Error{Code: types.ErrInvalidNetworkConfig, Msg: "the network config is too large for the devplumb agent",
			Details: err.Error()}
	}
	return &types.Error{Code: types.ErrInternal, Msg: fmt.Sprintf("devplumb agent: %v", err)}
}

// commit runs the delegates the agent answered, reports their outcome and
// prints what the agent answers.
func (e *entry) commit(ctx context.Context, c *agentproto.Client, cmd string, args *skel.CmdArgs,
	ans *agentproto.PrepareAnswer) error {
	if err := os.Setenv(depthEnv, "1"); err != nil { // libcni passes it on to the delegates
		return execDirect(args, fmt.Errorf("mark the delegates' depth: %w", err))
	}
	var result []byte
	run, err := newDelegateRun(args, ans.Delegate)
	derr := cniError(err) // nothing ran: the agent frees what it prepared
	if err == nil {
		result, derr = run.run(ctx, cmd)
	}
	out, err := c.Commit(ctx, &agentproto.Commit{Attachment: ans.Attachment, Result: result, Error: derr})
	if err != nil {
		// Lost after the delegates ran: the record is incomplete (an ADD)
		// or not yet released (a DEL). devplumb-direct finishes it: its ADD
		// undoes the recorded delegates (their results are in the shared
		// libcni cache) and adds afresh; its DEL runs the delegates' DEL
		// again, which a delegate must tolerate, and frees the device.
		c.Close()
		return agentFailed(args, err)
	}
	if out.Undo {
		rollback(ctx, c, ans.Attachment, run)
	}
	if out.Error != nil {
		return out.Error
	}
	return printResult(out.Result)
}

// rollback undoes an ADD whose delegates succeeded and whose commit failed
// (network-status required and refused, say): the agent holds the device
// until this runner ran the delegates' DEL and said so. If the agent is gone
// by then, the record keeps the device until the runtime's DEL after the
// failed ADD undoes it as after a crash: nothing more to do here, and the
// commit's error is printed either way.
func rollback(ctx context.Context, c *agentproto.Client, attachment string, run *delegateRun) {
	rb := &agentproto.Rollback{Attachment: attachment}
	if run != nil { // nil: the answered run was unreadable, nothing ran
		if err := run.del(ctx); err != nil {
			rb.Error = cniError(err)
		}
	}
	if _, err := c.Rollback(ctx, rb); err != nil {
		fmt.Fprintf(os.Stderr, "devplumb: rollback of the failed ADD: %v; the runtime's DEL frees the device\n", err)
	}
}

// printResult prints what the agent answered for the runtime.
func printResult(result []byte) error {
	if _, err := os.Stdout.Write(result); err != nil {
		return fmt.Errorf("print the result: %w", err)
	}
	return nil
}

// prepareOf is the call as the agent's prepare takes it: the CNI_* variables
// and stdin as skel read them.
func prepareOf(cmd string, args *skel.CmdArgs) *agentproto.Prepare {
	return &agentproto.Prepare{Command: cmd, ContainerID: args.ContainerID, Netns: args.Netns,
		IfName: args.IfName, Args: args.Args, Path: args.Path, StdinData: args.StdinData,
		NodeConfig: nodeconfig.Path()}
}

// cniError is err as the CNI error Commit carries: a delegate's own CNI
// error unchanged, anything else (a plugin not found, a bad result) as an
// internal error, with what failed in its message; nil for nil.
func cniError(err error) *types.Error {
	if err == nil {
		return nil
	}
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	return &types.Error{Code: types.ErrInternal, Msg: err.Error()}
}

// depthEnv is pkg/cni/plugin's DepthEnv (main_test.go keeps them equal): how
// many devplumb runs are above this one. devplumb never delegates to
// devplumb, so a run with a depth is refused (by devplumb-direct), and the
// delegates this entry point runs get depth 1.
const depthEnv = "DEVPLUMB_DEPTH"

// refuseDepth answers a run another devplumb started (a delegate, or a
// delegate's IPAM plugin, is devplumb, maybe under another name or as a copy
// without devplumb-direct beside it) as devplumb-direct does, here: the agent
// cannot see this environment, and a recursion must end at once. ADD is
// refused (code 7); DEL has nothing to undo and succeeds; CHECK is
// devplumb-direct's to judge.
func refuseDepth(cmd string, args *skel.CmdArgs) error {
	switch cmd {
	case agentproto.CmdDel:
		return nil
	case agentproto.CmdCheck:
		return execDirect(args, nil)
	}
	d := depth()
	return &types.Error{Code: types.ErrInvalidNetworkConfig, Msg: fmt.Sprintf("devplumb cannot delegate to itself: "+
		"a devplumb run started this one (%s=%d): a delegate, or a delegate's IPAM plugin, is devplumb", depthEnv, d)}
}

// depth is the depth the runtime's environment gives: 0 when unset or bad.
func depth() int {
	n, err := strconv.Atoi(os.Getenv(depthEnv))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
