package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/devplumb/devplumb/bench/statuscall"
	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// variant is one way of running the bridge delegate for P1.
type variant struct {
	label string
	net   string // cnitool network name
	pod   string
	netns string
	agent bool // through the node agent (the entry point's socket set to it)
	// agentProc is the agent it goes through (nil: none).
	agentProc *agentProc
	env       []string  // the entry point's extra environment: the agent's socket
	ms        []float64 // ADD+DEL cycles
	paired    []float64 // ADD+DEL cycles of the paired rounds (p1Pairs)
}

// p1 runs ADD+DEL cycles of every variant in turn (rotating the order each round, so
// drifting load spreads evenly) through cnitool into one netns per variant.
func p1(cfg Config, r *Report) error {
	e, err := newEnv(cfg, podresourcesserver.Config{NoRateLimit: true})
	if err != nil {
		return err
	}
	defer e.close()
	if err := e.pods.set(p1MaxVariants, 1); err != nil { // before the DRA pods join them
		return err
	}
	vs, err := p1Variants(e)
	if err != nil {
		return err
	}
	if err := startAgentIfRun(e, vs); err != nil {
		return err
	}
	for _, v := range vs {
		if v.netns, err = e.newNetns(); err != nil {
			return err
		}
	}
	if err := startThickIfRun(e, vs); err != nil {
		return err
	}
	before, err := p1Rounds(e, vs, cfg.Runs)
	if err != nil {
		return err
	}
	r.Tables = append(r.Tables, p1Table(vs, cfg))
	after, err := readAfter(e, vs)
	if err != nil {
		return err
	}
	if err := p1Pairs(e, vs, cfg.Pairs); err != nil {
		return err
	}
	floor := Summarize(vs[0].ms).Median
	if t := costsTable(vs, before, after, floor, addedOf(vs, "pass", floor)); t != nil {
		r.Tables = append(r.Tables, *t)
	}
	p := Panel{Title: "P1: one ADD+DEL cycle through cnitool", Unit: "ms"}
	for _, v := range vs {
		p.Bars = append(p.Bars, Bar{Label: v.label, S: Summarize(v.ms)})
	}
	r.Panels = append(r.Panels, p)
	return nil
}

// p1Rounds runs two warm-up rounds and then runs measured rounds of every variant, each
// once a round in a rotating order; it returns the agents' and the API server's readings
// taken before the measured rounds.
func p1Rounds(e *env, vs []*variant, runs int) (*p1Costs, error) {
	const warmup = 2
	var before *p1Costs
	for round := range warmup + runs {
		if round == warmup {
			var err error
			if before, err = readBefore(e, vs); err != nil {
				return nil, err
			}
		}
		for i := range vs {
			v := vs[(i+round)%len(vs)]
			d, err := cycle(e, v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", v.label, err)
			}
			if round >= warmup {
				v.ms = append(v.ms, Ms(d))
			}
		}
	}
	return before, nil
}

// pairedNets are the rows p1Pairs runs: the pass-through, the rows through the agent
// that issue 38's targets compare with it, and the least an agent-based meta-plugin
// costs (the pass-through's round trips to an agent that does nothing), without and
// with each row's own work: the records, the API writes.
var pairedNets = []string{"pass", "dpagent", "dpagentkube", "dpdraagent", "passagent", "passagentrecords", "passagentstatus", "passagentdra"}

// p1Pairs runs rounds more cycles of the pass-through and the rows through the agent
// alone, each round every one of them once in a rotating order: a 30-round median of
// the paired differences has a 95% interval wider than the targets' margins; 120 rounds
// made it about half as wide, and the default 360 narrow it by √3 more. They come after
// the agents' phases are read, so those stay the main rounds'.
func p1Pairs(e *env, vs []*variant, rounds int) error {
	var run []*variant
	for _, net := range pairedNets {
		if v := variantOf(vs, net); v != nil {
			run = append(run, v)
		}
	}
	if len(run) < 2 || run[0].net != "pass" {
		return nil
	}
	for round := range rounds {
		for i := range run {
			v := run[(i+round)%len(run)]
			d, err := cycle(e, v)
			if err != nil {
				return fmt.Errorf("%s (paired rounds): %w", v.label, err)
			}
			v.paired = append(v.paired, Ms(d))
		}
	}
	return nil
}

func cycle(e *env, v *variant) (time.Duration, error) {
	add, err := e.cnitool("add", v.net, v.netns, "net1", v.pod, v.env...)
	if err != nil {
		return 0, err
	}
	del, err := e.cnitool("del", v.net, v.netns, "net1", v.pod, v.env...)
	return add + del, err
}

// p1MaxVariants bounds P1's rows: pod-0.. of the PodResources server are theirs.
const p1MaxVariants = 20

// p1Net is one network P1 may run.
type p1Net struct {
	label string
	conf  map[string]any
	skip  bool
	kube  bool // with a kubeconfig: network-status written to the API server
	// status: the pass-through hands its results to the status daemon (statusd.go),
	// which writes network-status
	status bool
	// idle: the pass-through makes the agent protocol's round trips to the idle agent
	// (idleagent.go)
	idle  bool
	dra   string // a DRA claim's pod (the kubelet reports the claim; networkData written): its name
	agent bool   // through the node agent
}

// p1Variants writes the networks: the delegate alone (the floor), devplumb without an agent
// (the entry point execs devplumb-direct) with its state on disk and on tmpfs, with
// network-status and with a DRA claim's networkData, the same through the node agent, the
// baseline build, and Multus thin and thick.
func p1Variants(e *env) ([]*variant, error) {
	floor := e.bridge("10.123.0.0/24")
	floor["cniVersion"], floor["name"] = "1.0.0", "floor"
	multusDelegate := e.bridge("10.123.4.0/24")
	multusDelegate["cniVersion"], multusDelegate["name"] = "1.0.0", "multus-bridge"
	noKube, noAgent := e.cfg.kube == nil, e.cfg.Agent == ""
	state := filepath.Join(e.dir, "state")
	nets := append([]p1Net{{label: "bridge + host-local alone (floor)", conf: floor}}, passNets(e)...)
	nets = append(nets, []p1Net{
		{label: "devplumb -> bridge, no agent (state on disk)", conf: e.devplumbConf("dp", "10.123.1.0/24", state)},
		{label: "devplumb -> bridge, no agent (state on tmpfs)", conf: e.devplumbConf("dpshm", "10.123.2.0/24", filepath.Join(e.shm, "state"))},
		{label: "devplumb -> bridge via the agent", conf: e.devplumbConf("dpagent", "10.123.7.0/24", state), skip: noAgent, agent: true},
		{label: "devplumb -> bridge + network-status (API), no agent", conf: e.devplumbConf("dpkube", "10.123.5.0/24", state), skip: noKube, kube: true},
		{label: "devplumb -> bridge + network-status (API) via the agent", conf: e.devplumbConf("dpagentkube", "10.123.8.0/24", state),
			skip: noKube || noAgent, kube: true, agent: true},
		{label: "devplumb -> bridge + DRA claim's networkData and network-status (API), no agent",
			conf: e.devplumbConf("dpdra", "10.123.9.0/24", state), skip: noKube, dra: "p1-dra"},
		{label: "devplumb -> bridge + DRA claim's networkData and network-status (API) via the agent",
			conf: e.devplumbConf("dpdraagent", "10.123.10.0/24", state), skip: noKube || noAgent, dra: "p1-dra-agent", agent: true},
		{label: "devplumb baseline -> bridge (disk)", conf: baselineConf(e), skip: e.cfg.Baseline == ""},
		{label: "Multus thin -> bridge", conf: map[string]any{"cniVersion": "1.0.0", "name": "multus", "type": "multus",
			"binDir": e.bin, "cniDir": filepath.Join(e.dir, "multus"), "logLevel": "error",
			"delegates": []any{multusDelegate}}, skip: e.cfg.Multus == ""},
		{label: thickLabel, conf: thickShimConf(e), skip: thickSkipReason(e.cfg) != nil},
	}...)
	var vs []*variant
	for _, n := range nets {
		if n.skip {
			continue
		}
		v := &variant{label: n.label, net: n.conf["name"].(string), pod: podName(len(vs)), agent: n.agent}
		if err := p1Prepare(e, n, v); err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// passNets are P1's rows of bench/passthrough: alone, with one P, and the least
// agent-based rows (the idle agent doing nothing, keeping the records, making the API
// writes), and the pass-through writing by a warm daemon.
func passNets(e *env) []p1Net {
	noKube, noPass := e.cfg.kube == nil, e.cfg.Passthrough == ""
	return []p1Net{
		{label: passLabel, conf: map[string]any{"cniVersion": "1.0.0", "name": "pass", "type": "passthrough",
			"cacheDir": filepath.Join(e.dir, "passthrough"), "delegate": e.bridge("10.123.11.0/24")}, skip: noPass},
		{label: passOnePLabel, conf: map[string]any{"cniVersion": "1.0.0", "name": "pass1p", "type": "passthrough", "oneP": true,
			"cacheDir": filepath.Join(e.dir, "passthrough1p"), "delegate": e.bridge("10.123.12.0/24")}, skip: noPass},
		{label: passAgentLabel, conf: map[string]any{"cniVersion": "1.0.0", "name": "passagent", "type": "passthrough", "oneP": true,
			"cacheDir": filepath.Join(e.dir, "passagent"), "agentSocket": e.idleAgentSocket(), "delegate": e.bridge("10.123.15.0/24")},
			skip: noPass, idle: true},
		{label: passAgentRecordsLabel, conf: map[string]any{"cniVersion": "1.0.0", "name": "passagentrecords", "type": "passthrough",
			"oneP": true, "cacheDir": filepath.Join(e.dir, "passagentrecords"), "agentSocket": e.idleAgentSocket(),
			"agentRecords": recordsConf{StateDir: filepath.Join(e.dir, "idle-state"), DeviceInfoDir: e.pods.files.Dir,
				PodResources: e.pr.Socket(), Resource: Resource},
			"delegate": e.bridge("10.123.18.0/24")}, skip: noPass, idle: true},
		{label: passAgentStatusLabel, conf: map[string]any{"cniVersion": "1.0.0", "name": "passagentstatus", "type": "passthrough",
			"oneP": true, "cacheDir": filepath.Join(e.dir, "passagentstatus"), "agentSocket": e.idleAgentSocket(), "agentWrites": true,
			"delegate": e.bridge("10.123.16.0/24")}, skip: noPass || noKube, idle: true, status: true},
		{label: passAgentDRALabel, conf: map[string]any{"cniVersion": "1.0.0", "name": "passagentdra", "type": "passthrough",
			"oneP": true, "cacheDir": filepath.Join(e.dir, "passagentdra"), "agentSocket": e.idleAgentSocket(), "agentWrites": true,
			"delegate": e.bridge("10.123.17.0/24")}, skip: noPass || noKube, idle: true, status: true, dra: "p1-dra-passagent"},
		{label: passStatusLabel, conf: map[string]any{"cniVersion": "1.0.0", "name": "passstatus", "type": "passthrough",
			"cacheDir": filepath.Join(e.dir, "passstatus"), "statusSocket": e.statusSocket(), "delegate": e.bridge("10.123.13.0/24")},
			skip: noPass || noKube, status: true},
		{label: passDRALabel, conf: map[string]any{"cniVersion": "1.0.0", "name": "passdra", "type": "passthrough",
			"cacheDir": filepath.Join(e.dir, "passdra"), "statusSocket": e.statusSocket(), "delegate": e.bridge("10.123.14.0/24")},
			skip: noPass || noKube, status: true, dra: "p1-dra-pass"},
	}
}

// p1Prepare makes what the network needs in the API server (the pod; the DRA claim) and
// writes its config.
func p1Prepare(e *env, n p1Net, v *variant) error {
	switch {
	case n.dra != "":
		v.pod = n.dra
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dev := draDevice{name: "p1-nic-" + v.net, id: "p1-" + v.net}
		if err := e.pods.files.WriteDP(Resource, dev.id, pciInfo(0xfe00+len(v.net))); err != nil {
			return fmt.Errorf("device-info of %s: %w", dev.id, err)
		}
		if err := e.draPod(ctx, v.pod, dev, true); err != nil {
			return err
		}
		if !n.status {
			n.conf["kubeconfig"] = e.cfg.kube.srv.Kubeconfig
			break
		}
		n.conf["statusClaim"] = statuscall.Claim{Name: v.pod + "-" + draPodClaim, Driver: draDriver, Pool: kubeNodeName, Device: dev.name}
	case n.kube:
		if _, err := e.withKube(n.conf, v.pod); err != nil {
			return err
		}
	case n.status:
		if _, err := e.cfg.kube.pod(v.pod); err != nil {
			return err
		}
	}
	if n.status {
		if err := e.startStatusDaemon(); err != nil {
			return err
		}
	}
	if n.idle {
		if err := e.startIdleAgent(); err != nil {
			return err
		}
	}
	return e.writeNet(n.conf)
}

// statusSocket is where P1's status daemon listens.
func (e *env) statusSocket() string { return filepath.Join(e.dir, "statusd.sock") }

// startStatusDaemon starts P1's status daemon with the bench's kubeconfig, once;
// env.close stops it.
func (e *env) startStatusDaemon() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.statusd != nil {
		return nil
	}
	d, err := startStatusDaemon(e.cfg.kube.srv.Kubeconfig, e.statusSocket())
	if err != nil {
		return err
	}
	e.statusd = d
	return nil
}

// idleAgentSocket is where P1's idle agent listens, in a directory of its own that
// only root may write (the agent protocol's client talks to no other).
func (e *env) idleAgentSocket() string { return filepath.Join(e.dir, "idle-agent", "agent.sock") }

// startIdleAgent starts P1's idle agent in a process of its own (idleproc.go), once,
// making its writes with a client of the bench's kube-apiserver; env.close stops it.
func (e *env) startIdleAgent() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopIdleAgent != nil {
		return nil
	}
	kubeconfig := ""
	if e.cfg.kube != nil {
		kubeconfig = e.cfg.kube.srv.Kubeconfig
	}
	stop, err := spawnIdleAgent(e.idleAgentSocket(), kubeconfig)
	if err != nil {
		return err
	}
	e.stopIdleAgent = stop
	return nil
}

// startAgentIfRun starts P1's node agents when a row runs through one: an agent per node
// config of those rows (the agent reads its own node config: the rows with network-status
// name a kubeconfig in theirs, the plain row none).
func startAgentIfRun(e *env, vs []*variant) error {
	if !slices.ContainsFunc(vs, func(v *variant) bool { return v.agent }) {
		return nil
	}
	kc := ""
	if e.cfg.kube != nil {
		kc = e.cfg.kube.srv.Kubeconfig
	}
	agents := map[string]*agentProc{}
	for _, v := range vs {
		if !v.agent {
			continue
		}
		e.mu.Lock()
		node := e.nodeConfigs[v.net]
		e.mu.Unlock()
		a := agents[node]
		if a == nil {
			var err error
			if a, err = e.startAgent(fmt.Sprintf("agent%d", len(agents)), append(agentFlags(e.cfg, kc), "--node-config", node)...); err != nil {
				return err
			}
			agents[node] = a
		}
		v.env, v.agentProc = []string{a.env()}, a
	}
	return nil
}

// baselineConf is devplumb's network run by the baseline binary, linked as another type.
// Its node keys go to a node config like every network's (writeNet): a baseline built
// before node configs existed reads them from the network config only, and would run
// with the default paths.
func baselineConf(e *env) map[string]any {
	c := e.devplumbConf("dpbase", "10.123.3.0/24", filepath.Join(e.dir, "state"))
	if e.cfg.Baseline == "" {
		return c
	}
	c["type"] = "devplumb-baseline"
	if abs, err := filepath.Abs(e.cfg.Baseline); err == nil {
		_ = os.Symlink(abs, filepath.Join(e.bin, "devplumb-baseline"))
	}
	return c
}

// passLabel is the row of bench/passthrough, the reference meta-plugin;
// passOnePLabel the same with one P, as devplumb's entry point runs.
const (
	passLabel     = "Go pass-through meta-plugin -> bridge (libcni, nothing else)"
	passOnePLabel = "Go pass-through meta-plugin with one P (GOMAXPROCS=1) -> bridge"
	// passAgentLabel is the one-P pass-through making the agent protocol's round trips
	// to an agent that does nothing: the least an agent-based meta-plugin costs here.
	passAgentLabel = "Go pass-through meta-plugin with one P -> bridge, making the agent protocol's round trips to an agent that does nothing"
	// passAgentRecordsLabel is the same with the idle agent keeping the records crash
	// safety and the one-device rule need (idlerecords.go): the least an agent-based
	// meta-plugin keeping devplumb's promises costs here.
	passAgentRecordsLabel = "Go pass-through meta-plugin with one P -> bridge, making the agent protocol's round trips to an agent that makes only the PodResources Get, the state records and the device-info file"
	// passAgentStatusLabel is the same with the idle agent making network-status's
	// writes: the least an agent-based meta-plugin that writes it costs here.
	passAgentStatusLabel = "Go pass-through meta-plugin with one P -> bridge, making the agent protocol's round trips to an agent that makes only the network-status writes"
	// passAgentDRALabel is the same making a DRA claim's networkData's writes as well.
	passAgentDRALabel = "Go pass-through meta-plugin with one P -> bridge, making the agent protocol's round trips to an agent that makes only the DRA networkData and network-status writes"
	// passStatusLabel is the pass-through writing network-status through a warm daemon:
	// the least a meta-plugin that writes it before ADD returns costs here.
	passStatusLabel = "Go pass-through meta-plugin -> bridge + network-status (API) by a warm daemon (one round trip, one PATCH)"
	// passDRALabel is the same writing a DRA claim's networkData as well, as the DRA rows.
	passDRALabel = "Go pass-through meta-plugin -> bridge + DRA claim's networkData and network-status (API) by a warm daemon"
)

func p1Table(vs []*variant, cfg Config) Table {
	t := Table{Title: "P1: ADD+DEL wall time through cnitool",
		Header: []string{"what", "ADD+DEL", "× floor", "added over the floor", "added ÷ Multus thin's", "added ÷ Multus thick's"}}
	floor := Summarize(vs[0].ms).Median
	thin, thick := addedOf(vs, "multus", floor), addedOf(vs, "multusthick", floor)
	for _, v := range vs {
		s := Summarize(v.ms)
		added := s.Median - floor
		t.Rows = append(t.Rows, []string{v.label, s.Format("ms"), fmt.Sprintf("%.2f", s.Median/floor),
			fmt.Sprintf("%.1f ms", added), ratio(added, thin, v == vs[0]), ratio(added, thick, v == vs[0])})
	}
	t.Notes = append(t.Notes, "Targets: no agent, devplumb's cycle at most 1.3 × the floor, its added time at most half of Multus thin's (issue 16). Through the agent (issue 24): at most 1.2 × the floor; with network-status (API) at most 1.3 × the floor and its added time at most 0.4 of Multus thick's; the same for the DRA row.",
		"devplumb asks the PodResources server for the pod's device on every ADD; without a kubeconfig, as Multus thin here, unless the row says API: then it writes and removes its network-status entry on a real kube-apiserver (make bench runs one); the DRA rows also apply and remove the claim's status.devices[] entry (networkData), the kubelet reporting the claim (P6's local path).",
		"No agent: the entry point devplumb finds no socket and execs devplumb-direct, which does the whole call (today's path on a node without the agent). Via the agent: a `devplumb-agent` started for P1 (as the DaemonSet would run it; one per node config: the API rows' names a kubeconfig, the plain row's none) prepares and commits each call over its unix socket; the entry point runs bridge + host-local itself.")
	if pass := addedOf(vs, "pass", floor); pass >= 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("The pass-through row (bench/passthrough: a CNI plugin that runs its delegate with libcni in its own "+
			"process and does nothing else) is the least a meta-plugin in Go costs on this machine: %.1f ms over the floor, %.2f × it. "+
			"devplumb's entry point pays that before it asks the agent anything; over the pass-through, devplumb adds %s through the agent "+
			"(no kubeconfig).", pass, (floor+pass)/floor, overPass(vs, "dpagent", floor, pass)))
	}
	if onep := addedOf(vs, "pass1p", floor); onep >= 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("devplumb's entry point runs with one P (runtime.GOMAXPROCS(1)): a second P spins looking "+
			"for work whenever the entry point waits for the agent, on the CPU the agent then needs. The pass-through with one P "+
			"(%.2f × the floor) shows that this does not make a plain meta-plugin cheaper: its only wait is for its delegate.", (floor+onep)/floor))
	}
	if cfg.Multus == "" {
		t.Notes = append(t.Notes, "Multus thin not run: no binary given (make bench builds it with scripts/build-multus.sh).")
	}
	if err := thickSkipReason(cfg); err != nil {
		t.Notes = append(t.Notes, "Multus thick not run: "+err.Error()+".")
	} else {
		t.Notes = append(t.Notes, "Multus thick: multus-shim forwards each call over a unix socket to one multus-daemon started for the run (a DaemonSet on a node; here a local process in a mount namespace of its own that gives it the service-account token of the bench's kube-apiserver, the in-cluster config it requires). The daemon reads the pod from its informer and writes Multus's network-status annotation, so its row compares with devplumb's API row.")
	}
	return t
}

// addedOf is the median time the network net adds over the floor, or -1 when not run.
func addedOf(vs []*variant, net string, floor float64) float64 {
	if v := variantOf(vs, net); v != nil {
		return Summarize(v.ms).Median - floor
	}
	return -1
}

// variantOf is the row of network net, or nil when it was not run.
func variantOf(vs []*variant, net string) *variant {
	for _, v := range vs {
		if v.net == net {
			return v
		}
	}
	return nil
}

// ratio is added ÷ of as a table cell: "–" for the floor and when of was not measured.
func ratio(added, of float64, isFloor bool) string {
	if of <= 0 || isFloor {
		return "–"
	}
	return fmt.Sprintf("%.2f", added/of)
}

// overPass is what network net adds over the pass-through row, as a note's words.
func overPass(vs []*variant, net string, floor, pass float64) string {
	added := addedOf(vs, net, floor)
	if added < 0 {
		return "nothing measured (no agent row)"
	}
	return fmt.Sprintf("%.1f ms", added-pass)
}
