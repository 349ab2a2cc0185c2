package bench

// The least an agent-based meta-plugin costs here: bench/passthrough with "agentSocket"
// makes the round trips devplumb's entry point makes with its node agent (agentproto:
// connect and hello, prepare, commit; a DEL's prepare with its hello) to this agent,
// which answers each at once and does nothing else: no config, no PodResources, no
// record, no device-info file. P1's row for it is the reference of devplumb's row
// through the agent, which differs from it by the agent's own work.

import (
	"context"
	"fmt"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// idleAgent answers a prepare with the call's own config as the delegate to run (the
// pass-through runs its own) and a commit with the result it was given.
type idleAgent struct{}

func (idleAgent) Build() string { return "bench-idle-agent" }

func (idleAgent) Prepare(_ context.Context, p *agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
	return &agentproto.PrepareAnswer{Attachment: p.ContainerID + "/" + p.IfName,
		Delegate: &agentproto.Delegate{ConfList: p.StdinData}}, nil
}

func (idleAgent) Commit(_ context.Context, c *agentproto.Commit) (*agentproto.CommitAnswer, error) {
	return &agentproto.CommitAnswer{Result: c.Result}, nil
}

// startIdleAgent serves socket until the returned stop, which waits for the calls
// under way.
func startIdleAgent(socket string) (stop func(), err error) {
	l, err := agentproto.Listen(socket)
	if err != nil {
		return nil, fmt.Errorf("idle agent: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = agentproto.Serve(ctx, l, idleAgent{}) // ends with ctx
	}()
	return func() { cancel(); <-done }, nil
}
