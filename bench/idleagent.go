package bench

// The least an agent-based meta-plugin costs here: bench/passthrough with "agentSocket"
// makes the round trips devplumb's entry point makes with its node agent (agentproto:
// connect and hello, prepare, commit; a DEL's prepare with its hello) to this agent,
// which answers each at once and does nothing else: no config, no PodResources, no
// record, no device-info file. P1's row for it is the reference of devplumb's row
// through the agent, which differs from it by the agent's own work.
//
// For a network whose config says "agentWrites", the agent also makes the status
// daemon's writes (statusd.go) in the commit, when devplumb's agent makes them: an ADD's
// network-status PATCH (and its claim's status, at the same time) before it answers; a
// DEL's claim entry removed before it answers, the pod's entry after. Those rows are the
// least an agent-based meta-plugin that writes to the API server costs, the references
// of devplumb's API rows through the agent.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/bench/statuscall"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// idleAgent answers a prepare with the call's own config as the delegate to run (the
// pass-through runs its own) and a commit with the result it was given.
type idleAgent struct {
	status func() *statusDaemon // the writes' daemon (nil: none is running)
	mu     sync.Mutex
	calls  map[string]statuscall.Call // the prepared calls that write, by attachment
}

func (*idleAgent) Build() string { return "bench-idle-agent" }

func (a *idleAgent) Prepare(_ context.Context, p *agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
	ans := &agentproto.PrepareAnswer{Attachment: p.ContainerID + "/" + p.IfName,
		Delegate: &agentproto.Delegate{ConfList: p.StdinData}}
	call, writes, err := writingCall(p)
	if err != nil || !writes {
		return ans, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls[ans.Attachment] = call
	return ans, nil
}

func (a *idleAgent) Commit(_ context.Context, c *agentproto.Commit) (*agentproto.CommitAnswer, error) {
	a.mu.Lock()
	call, writes := a.calls[c.Attachment]
	delete(a.calls, c.Attachment)
	a.mu.Unlock()
	if writes && c.Error == nil {
		if err := a.write(call, c.Result); err != nil {
			return &agentproto.CommitAnswer{Error: &types.Error{Code: types.ErrInternal, Msg: err.Error()}}, nil
		}
	}
	return &agentproto.CommitAnswer{Result: c.Result}, nil
}

// write makes call's writes as the status daemon makes them for the pass-through.
func (a *idleAgent) write(call statuscall.Call, result []byte) error {
	d := a.status()
	if d == nil {
		return fmt.Errorf("network %s writes to the API server, and no status daemon runs", call.Network)
	}
	if call.Add {
		call.Result = result
		return d.add(call)
	}
	err := d.claimStatus(call, nil)
	d.wg.Go(func() { _ = d.patch(call, nil) }) // the pod's entry goes after DEL answers
	return err
}

// writingCall is the call whose writes the agent makes, when the network's config says
// "agentWrites": its pod from CNI_ARGS, its claim from the config's "statusClaim".
func writingCall(p *agentproto.Prepare) (statuscall.Call, bool, error) {
	var conf struct {
		Name   string            `json:"name"`
		Writes bool              `json:"agentWrites"`
		Claim  *statuscall.Claim `json:"statusClaim"`
	}
	if err := json.Unmarshal(p.StdinData, &conf); err != nil {
		return statuscall.Call{}, false, fmt.Errorf("idle agent: network config: %w", err)
	}
	if !conf.Writes {
		return statuscall.Call{}, false, nil
	}
	var pod struct {
		types.CommonArgs
		K8S_POD_NAMESPACE types.UnmarshallableString //nolint:revive // CNI_ARGS key
		K8S_POD_NAME      types.UnmarshallableString //nolint:revive // CNI_ARGS key
	}
	if err := types.LoadArgs(p.Args, &pod); err != nil {
		return statuscall.Call{}, false, fmt.Errorf("idle agent: CNI_ARGS: %w", err)
	}
	return statuscall.Call{Add: p.Command == agentproto.CmdAdd, Namespace: string(pod.K8S_POD_NAMESPACE),
		Pod: string(pod.K8S_POD_NAME), Network: conf.Name, Claim: conf.Claim}, true, nil
}

// startIdleAgent serves socket until the returned stop, which waits for the calls
// under way; status gives the daemon whose writes it makes for the networks that ask.
func startIdleAgent(socket string, status func() *statusDaemon) (stop func(), err error) {
	l, err := agentproto.Listen(socket)
	if err != nil {
		return nil, fmt.Errorf("idle agent: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	a := &idleAgent{status: status, calls: map[string]statuscall.Call{}}
	go func() {
		defer close(done)
		_ = agentproto.Serve(ctx, l, a) // ends with ctx
	}()
	return func() { cancel(); <-done }, nil
}
