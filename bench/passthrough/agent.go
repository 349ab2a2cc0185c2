package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// With "agentSocket" the pass-through makes the round trips devplumb's entry
// point makes with its node agent, over the same protocol, to an agent that
// does nothing (make bench's): connect and hello, prepare, its delegate,
// commit for an ADD; hello with the prepare, its delegate, commit for a DEL.
// P1's row for it is the least an agent-based meta-plugin costs here: what
// devplumb's row through the agent costs over it is the agent's own work.

// agentBuild is the build the pass-through tells the agent in hello.
const agentBuild = "passthrough"

// viaAgent runs the delegate (an ADD's result, none for a DEL) between the
// agent's prepare and commit, and prints what the commit answers for an ADD.
func viaAgent(c conf, args *skel.CmdArgs, add bool, delegate func() (types.Result, error)) error {
	ctx := context.Background()
	cl, ans, err := prepareAt(ctx, c.AgentSocket, args, add)
	if err != nil {
		return fmt.Errorf("passthrough agent: %w", err)
	}
	defer cl.Close()
	result, err := delegate()
	var raw []byte
	if err == nil && result != nil {
		raw, err = json.Marshal(result)
	}
	if err != nil {
		return err
	}
	out, err := cl.Commit(ctx, &agentproto.Commit{Attachment: ans.Attachment, Result: raw})
	if err != nil {
		return fmt.Errorf("passthrough agent: %w", err)
	}
	if !add {
		return nil
	}
	_, err = os.Stdout.Write(out.Result)
	return err
}

// prepareAt has the agent on socket prepare the call as the entry point
// does: an ADD's prepare after the hello, which carries its lookahead; a
// DEL's with the hello.
func prepareAt(ctx context.Context, socket string, args *skel.CmdArgs, add bool) (*agentproto.Client, *agentproto.PrepareAnswer, error) {
	p := &agentproto.Prepare{Command: agentproto.CmdDel, ContainerID: args.ContainerID, Netns: args.Netns,
		IfName: args.IfName, Args: args.Args, Path: args.Path, StdinData: args.StdinData}
	if !add {
		return agentproto.DialDel(ctx, socket, time.Second, agentBuild, p)
	}
	p.Command = agentproto.CmdAdd
	cl, err := agentproto.DialAdd(socket, time.Second, agentBuild, p)
	if err != nil {
		return nil, nil, err
	}
	ans, err := cl.Prepare(ctx, p)
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return cl, ans, nil
}
