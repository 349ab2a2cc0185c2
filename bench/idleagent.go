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
	"strings"
	"sync"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/bench/statuscall"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// idleAgent answers a prepare with the call's own config as the delegate to run (the
// pass-through runs its own) and a commit with the result it was given.
type idleAgent struct {
	status  func() *statusDaemon // the writes' daemon (nil: none is running)
	keepers keepers              // the records of the networks that keep them
	mu      sync.Mutex
	calls   map[string]preparedCall // the prepared calls with work in their commit, by attachment
}

// preparedCall is the work a prepared call's commit does.
type preparedCall struct {
	add     bool
	writes  *statuscall.Call // the API writes (nil: none)
	records *recordKeeper    // the records (nil: none)
}

func (*idleAgent) Build() string { return "bench-idle-agent" }

func (a *idleAgent) Prepare(ctx context.Context, p *agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
	ans := &agentproto.PrepareAnswer{Attachment: p.ContainerID + "/" + p.IfName,
		Delegate: &agentproto.Delegate{ConfList: p.StdinData}}
	call, err := a.prepared(ctx, p, ans.Attachment)
	if err != nil || call == nil {
		return ans, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls[ans.Attachment] = *call
	return ans, nil
}

func (a *idleAgent) Commit(_ context.Context, c *agentproto.Commit) (*agentproto.CommitAnswer, error) {
	a.mu.Lock()
	call, ok := a.calls[c.Attachment]
	delete(a.calls, c.Attachment)
	a.mu.Unlock()
	if ok {
		if err := a.commit(call, c); err != nil {
			return &agentproto.CommitAnswer{Error: &types.Error{Code: types.ErrInternal, Msg: err.Error()}}, nil
		}
	}
	return &agentproto.CommitAnswer{Result: c.Result}, nil
}

// prepared does the prepare's work of a network whose config asks for some, and returns
// what its commit is to do (nil: nothing): the records it keeps ("agentRecords",
// idlerecords.go), the writes it makes ("agentWrites": its pod from CNI_ARGS, its claim
// from "statusClaim").
func (a *idleAgent) prepared(ctx context.Context, p *agentproto.Prepare, attachment string) (*preparedCall, error) {
	var conf struct {
		Name    string            `json:"name"`
		Writes  bool              `json:"agentWrites"`
		Claim   *statuscall.Claim `json:"statusClaim"`
		Records *recordsConf      `json:"agentRecords"`
	}
	if err := json.Unmarshal(p.StdinData, &conf); err != nil {
		return nil, fmt.Errorf("idle agent: network config: %w", err)
	}
	call := preparedCall{add: p.Command == agentproto.CmdAdd}
	if conf.Records != nil {
		k, err := a.keepers.of(*conf.Records)
		if err != nil {
			return nil, err
		}
		if err := k.prepare(ctx, p, recordName(attachment)); err != nil {
			return nil, err
		}
		call.records = k
	}
	if conf.Writes {
		ns, name, err := podOf(p.Args)
		if err != nil {
			return nil, err
		}
		call.writes = &statuscall.Call{Add: call.add, Namespace: ns, Pod: name, Network: conf.Name, Claim: conf.Claim}
	}
	if call.records == nil && call.writes == nil {
		return nil, nil
	}
	return &call, nil
}

// commit does a prepared call's commit work: a failed ADD's records go as a DEL's.
func (a *idleAgent) commit(call preparedCall, c *agentproto.Commit) error {
	if call.records != nil {
		if err := call.records.commit(call.add && c.Error == nil, recordName(c.Attachment), c.Result); err != nil {
			return err
		}
	}
	if call.writes != nil && c.Error == nil {
		return a.write(*call.writes, c.Result)
	}
	return nil
}

// recordName is an attachment's record name: "container_ifname".
func recordName(attachment string) string { return strings.ReplaceAll(attachment, "/", "_") }

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

// startIdleAgent serves socket until the returned stop, which waits for the calls
// under way; status gives the daemon whose writes it makes for the networks that ask.
func startIdleAgent(socket string, status func() *statusDaemon) (stop func(), err error) {
	l, err := agentproto.Listen(socket)
	if err != nil {
		return nil, fmt.Errorf("idle agent: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	a := &idleAgent{status: status, keepers: keepers{byDir: map[string]*recordKeeper{}}, calls: map[string]preparedCall{}}
	go func() {
		defer close(done)
		_ = agentproto.Serve(ctx, l, a) // ends with ctx
	}()
	return func() { cancel(); <-done; a.keepers.close() }, nil
}
