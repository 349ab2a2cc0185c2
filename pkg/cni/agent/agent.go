// Package agent is devplumb's node agent (issue 24): an agentproto.Handler
// that runs ADD and DEL in two steps (plugin.PrepareAdd/CommitAdd,
// PrepareDel/CommitDel) around the delegates the CNI entry point runs, and
// keeps across calls what every devplumb-direct run builds anew: the
// Kubernetes client of each kubeconfig and the PodResources connection of
// each kubelet socket.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
	"github.com/devplumb/devplumb/podresources"
)

// Defaults of Config.
const (
	// DefaultPendingTTL is how long a prepared call waits for its commit:
	// the runtime's CNI timeout bounds the delegates' run in between.
	DefaultPendingTTL = agentproto.DefaultCommitWait
	// DefaultMaxPending bounds the prepared calls kept at once: far more
	// than a node's pods attach at once, far less than what would hurt.
	DefaultMaxPending = 1024
)

// Config is what an Agent is built from; zero values are the defaults.
type Config struct {
	Build string       // the agent's build version, answered to every hello
	Log   *slog.Logger // nil: slog.Default()
	// Timeout bounds each request to the kubelet or the API server, as
	// plugin.Plugin.Timeout (0: podresources.DefaultTimeout).
	Timeout time.Duration
	// NewKube builds the Kubernetes client of a kubeconfig; the agent keeps
	// one per kubeconfig and builds it again when the file changes. nil:
	// configs with a kubeconfig fail as in a build without a client.
	NewKube func(kubeconfig string, timeout time.Duration, log *slog.Logger) (plugin.Kube, error)
	// Phases gets each call's phase timings (the node's histograms); nil:
	// they go to the phase spool, as devplumb-direct's do.
	Phases func(phasespool.Record)
	// NodeConfig is the node config file (pkg/cni/nodeconfig) every call
	// follows: the node's paths and kubeconfig, read again when the file
	// changes (nodeconfig.Cache). Empty: nodeconfig.Path().
	NodeConfig string
	PendingTTL time.Duration
	MaxPending int
}

// Agent serves the CNI entry point's calls. It is safe for concurrent use.
type Agent struct {
	build   string
	log     *slog.Logger
	plugin  *plugin.Plugin
	pending *pendingTable
	kube    *kubeCache
	kubelet *kubeletCache
	later   *laterWrites
	looked  lookaheads
	metrics *metrics
	aside   *agentproto.Workers // the calls' work aside (Plugin.Go)
}

// New returns an agent; Close ends it.
func New(cfg Config) *Agent {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = podresources.DefaultTimeout
	}
	a := &Agent{
		build:   cfg.Build,
		log:     log,
		pending: newPendingTable(orDefault(cfg.PendingTTL, DefaultPendingTTL), cfg.MaxPending, log),
		kube:    &kubeCache{build: cfg.NewKube, log: log},
		kubelet: &kubeletCache{dial: podresources.New, log: log},
		later:   newLaterWrites(defaultMaxLater),
		aside:   agentproto.NewWorkers(agentproto.WorkerIdle),
	}
	if a.pending.max <= 0 {
		a.pending.max = DefaultMaxPending
	}
	a.metrics = newMetrics(a.pending, a.later)
	// LogTo stays unset: every call logs through the agent's own logger
	// (its level and format), not a network's logFile; a DEL's removals
	// outlive its call.
	a.plugin = &plugin.Plugin{Log: log, Timeout: cfg.Timeout, PodResources: a.kubelet.get, Phases: cfg.Phases,
		Later: a.later, NodeConfig: cfg.NodeConfig, NodeConfigs: &nodeconfig.Cache{}, Go: a.aside.Go,
		Configs: &config.Cache{}}
	if cfg.NewKube != nil {
		a.plugin.NewKube = a.kube.get
	}
	return a
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Close gives up every prepared call (as a crash would: the records stay
// for the next ADD, DEL or gc), waits a while for the removals DELs left to
// the API server, and closes the kubelet connections and API clients.
func (a *Agent) Close() {
	a.pending.closeAll()
	if !a.later.close(a.plugin.Timeout) {
		a.log.Warn("exiting with DEL removals not yet written to the API server: " +
			"their network-status entries stay on pods being torn down")
	}
	a.aside.Stop() // each Get or write aside ends within the calls' timeout
	a.kubelet.closeAll()
	a.kube.closeAll()
}

// Warm builds the client of kubeconfig now (with agent.NodeKube, its
// watches start), so that the first ADD naming it finds them synced.
func (a *Agent) Warm(kubeconfig string) error {
	if a.plugin.NewKube == nil {
		return errors.New("the agent has no Kubernetes client builder")
	}
	_, err := a.plugin.NewKube(kubeconfig, a.plugin.Timeout, a.log)
	return err
}

// Build is the agent's build version.
func (a *Agent) Build() string { return a.build }

// Prepare runs the first step of ADD or DEL. CHECK is not served: the entry
// point's fallback (devplumb-direct) runs it whole.
func (a *Agent) Prepare(ctx context.Context, p *agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
	ans, err := a.prepare(ctx, p)
	if err == nil && ans != nil && ans.Attachment != "" {
		a.pending.bind(ctx, ans.Attachment) // only this connection may commit it
	}
	a.metrics.count("prepare", p.Command, ans != nil && ans.Error != nil, err)
	return ans, err
}

func (a *Agent) prepare(ctx context.Context, p *agentproto.Prepare) (*agentproto.PrepareAnswer, error) {
	looked := a.looked.take(ctx) // the prepare's own, or given up here
	args := argsOf(p)
	if p.Command == agentproto.CmdAdd {
		return a.prepareAdd(a.forCall(p), args, looked)
	}
	looked.Close() // an ADD's, and this prepare is not one
	if p.Command == agentproto.CmdDel {
		return a.prepareDel(a.forCall(p), args)
	}
	return nil, fmt.Errorf("%s is not served by the agent: run devplumb-direct", p.Command)
}

// Lookahead starts the PodResources Get of the ADD the entry point
// prepares next on this connection (agentproto.LookaheadHandler): it
// overlaps the hello's answer and the prepare's trip.
func (a *Agent) Lookahead(ctx context.Context, p *agentproto.Prepare) {
	a.looked.put(ctx, a.forCall(p).LookAhead(argsOf(p)))
}

// argsOf is a prepare's call as skel gives it to a plugin.
func argsOf(p *agentproto.Prepare) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: p.ContainerID, Netns: p.Netns, IfName: p.IfName, Args: p.Args,
		Path: p.Path, StdinData: p.StdinData}
}

// forCall is the agent's plugin with the node config the call's entry point
// reads: the runtime's environment names it, and only root reaches the
// agent, so it is the node's as much as the agent's own --node-config.
// The entry point checks the answer against that same file.
func (a *Agent) forCall(p *agentproto.Prepare) *plugin.Plugin {
	if p.NodeConfig == "" || p.NodeConfig == a.plugin.NodeConfig {
		return a.plugin
	}
	pl := *a.plugin
	pl.NodeConfig = p.NodeConfig
	return &pl
}

// Commit runs the second step of the prepared call the commit names.
func (a *Agent) Commit(ctx context.Context, c *agentproto.Commit) (*agentproto.CommitAnswer, error) {
	e, err := a.pending.take(ctx, c.Attachment)
	if err != nil {
		a.metrics.count("commit", "", false, err)
		return nil, err
	}
	var delegateErr error
	if c.Error != nil { // not a typed nil in the interface
		delegateErr = c.Error
	}
	var ans *agentproto.CommitAnswer
	command := agentproto.CmdAdd
	if e.add != nil {
		ans = a.commitAdd(c.Attachment, e, c.Result, delegateErr)
	} else {
		command, ans = agentproto.CmdDel, commitDel(e.del, delegateErr)
	}
	a.metrics.count("commit", command, ans.Error != nil, nil)
	return ans, nil
}

// Rollback ends an ADD whose commit asked for an undo, once the entry point
// ran the delegates' DEL.
func (a *Agent) Rollback(ctx context.Context, r *agentproto.Rollback) (*agentproto.RollbackAnswer, error) {
	ans, err := a.rollback(ctx, r)
	a.metrics.count("rollback", agentproto.CmdAdd, false, err)
	return ans, err
}

func (a *Agent) rollback(ctx context.Context, r *agentproto.Rollback) (*agentproto.RollbackAnswer, error) {
	e, err := a.pending.take(ctx, r.Attachment)
	if err != nil {
		return nil, err
	}
	if e.add == nil || !e.add.UndoPending() {
		e.close()
		return nil, fmt.Errorf("prepared call %s is not waiting for a rollback", r.Attachment)
	}
	if r.Error != nil {
		// As devplumb-direct after its own undo: the failure is logged and
		// the device freed; gc finds what the DEL left.
		a.log.Error("rollback: the delegates' DEL failed", "attachment", e.add.Key, "err", r.Error)
	}
	e.add.Rollback()
	return &agentproto.RollbackAnswer{}, nil
}

// errUnknown is a commit or rollback of no pending call: expired, given up
// by a restart, or never prepared here.
var errUnknown = errors.New("no prepared call by that attachment (expired, or prepared by an agent since restarted)")
