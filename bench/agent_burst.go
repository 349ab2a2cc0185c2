package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// agentBurstPods is a full node's pods (the kubelet's default maxPods).
const agentBurstPods = 110

const p8Title = "P8: 110 pods added at once, with and without the agent: API requests and PodResources calls per ADD, PodResources at the kubelet's default rate limit (100 QPS, burst 10)"

// p8Mode is one way the burst's calls run.
type p8Mode struct {
	label string
	env   []string // the entry point's extra environment
}

// paths is how the burst's ADDs went: through the agent or fell back (at which step), or,
// without an agent, all by devplumb-direct.
func (m p8Mode) paths(n map[string]int) string {
	if len(m.env) == 0 {
		return "devplumb-direct " + fmt.Sprint(agentBurstPods)
	}
	return describePaths(n)
}

// p8Counts is what one burst (ADD or DEL) cost.
type p8Counts struct {
	burstResult
	calls, served int64          // PodResources calls made, and answered past the limiter
	requests      map[string]int // API requests through the counting proxy
}

// p8 adds 110 pods at once (one attachment each, network-status written when there is an
// API server), then deletes them, first without the agent and then through it, and counts
// what each ADD asked the API server (reads and writes) and the kubelet's PodResources.
func p8(cfg Config, r *Report) error {
	if cfg.Agent == "" {
		r.Tables = append(r.Tables, Table{Title: p8Title, Notes: []string{"Not run: no devplumb-agent (-agent)."}})
		return nil
	}
	var calls atomic.Int64
	e, err := newEnvWithPods(cfg, podresourcesserver.Config{OnCall: func(string) { calls.Add(1) }}, agentBurstPods, 1)
	if err != nil {
		return err
	}
	defer e.close()
	b, err := newP8Burst(e)
	if err != nil {
		return err
	}
	defer b.close()
	a, err := e.startAgent("agent", b.agentFlags()...)
	if err != nil {
		return err
	}
	defer a.stop() // before the proxy closes: its watches hold the proxy's connections
	b.agent = a
	if err := b.warmUp(a); err != nil {
		return err
	}
	t := Table{Title: p8Title, Header: []string{"path", "ADDs", "failed ADDs", "how each ADD went", "all ADDs done in", "PodResources calls per ADD", "refused (rate limit)",
		"API requests per ADD: reads", "writes", "ADD requests", "failed DELs", "API requests per DEL: reads, writes", "records left", "agent cache lookups (ADD and DEL)"}}
	for _, m := range []p8Mode{{label: "no agent"}, {label: "via the agent", env: []string{a.env()}}} {
		before, err := b.lookups()
		if err != nil {
			return err
		}
		row, err := b.run(m, &calls)
		if err != nil {
			return fmt.Errorf("%s: %w", m.label, err)
		}
		after, err := b.lookups()
		if err != nil {
			return err
		}
		t.Rows = append(t.Rows, append(row, describeLookups(before, after)))
	}
	t.Notes = p8Notes(cfg)
	r.Tables = append(r.Tables, t)
	return nil
}

func p8Notes(cfg Config) []string {
	n := []string{"Targets (issue 24): through the agent, writes only (no reads) and at most one PodResources call per ADD, none refused, no ADD failed.",
		"How each ADD went is read from the entry point's one line on stderr when it falls back to devplumb-direct (as in P9): an agent that does not answer its hello within 1 s (starved of CPU by the burst, say) leaves the call to devplumb-direct, which reads the pod and asks PodResources itself.",
		"Each ADD: cnitool -> devplumb -> bridge + host-local in its pod's own netns; all 110 at once, then all DELs at once. PodResources calls are counted at the bench's PodResources server (the project's kubelet PodResources v1 server at the kubelet's default limit); refused ones are those its limiter turned away (each is a retry, or a failure, for the caller). API requests are counted by a TLS proxy in front of the kube-apiserver that the networks' kubeconfig (and the agent's) points to; reads are GETs (get, list, watch), writes POST, PUT, PATCH and DELETE; per ADD is the burst's total ÷ 110. The agent ran one ADD and DEL before the bursts: its first call with a kubeconfig builds the client and starts the node's watches (their list and watch requests are not counted in the bursts)."}
	if cfg.kube == nil {
		n = append(n, "No API server (-kube not given): the networks have no kubeconfig and make no API requests.")
	}
	return n
}

// p8Burst is the node of P8: the counting proxy, the network and each pod's netns.
type p8Burst struct {
	e     *env
	rc    *kubeapi.RequestCounter // nil without an API server
	kc    string                  // the proxy's kubeconfig
	state string
	netns []string
	agent *agentProc
}

func newP8Burst(e *env) (*p8Burst, error) {
	b := &p8Burst{e: e, state: filepath.Join(e.dir, "state")}
	var err error
	conf := e.devplumbConf("p8", "10.128.0.0/24", b.state)
	if e.cfg.kube != nil {
		if b.rc, err = kubeapi.NewRequestCounter(e.cfg.kube.srv.URL); err != nil {
			return nil, err
		}
		b.kc = filepath.Join(e.dir, "counted.kubeconfig")
		if err := os.WriteFile(b.kc, []byte(kubeapi.Kubeconfig(b.rc.URL, e.cfg.kube.srv.Token)), 0o600); err != nil {
			b.close()
			return nil, err
		}
		conf["kubeconfig"] = b.kc
		for i := range agentBurstPods {
			if _, err := e.cfg.kube.pod(podName(i)); err != nil {
				b.close()
				return nil, err
			}
		}
	}
	if err := e.writeNet(conf); err != nil {
		b.close()
		return nil, err
	}
	b.netns = make([]string, agentBurstPods)
	for i := range b.netns {
		if b.netns[i], err = e.newNetns(); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

func (b *p8Burst) close() {
	if b.rc != nil {
		b.rc.Close()
	}
}

// warmUp runs one ADD and DEL through the agent, which starts its watches of the node
// (an agent builds a network's client and cache at its first call): the bursts measure
// the steady state.
func (b *p8Burst) warmUp(a *agentProc) error {
	for _, cmd := range []string{"add", "del"} {
		if _, err := b.e.cnitool(cmd, "p8", b.netns[0], "net1", podName(0), a.env()); err != nil {
			return fmt.Errorf("warm-up through the agent: %w", err)
		}
	}
	return nil
}

// agentFlags are the agent's flags for this node: its API server through the proxy.
func (b *p8Burst) agentFlags() []string {
	return append(agentFlags(b.e.cfg, b.kc), b.e.nodeConfigFlag("p8")...)
}

// lookups is the agent's cache lookups so far by kind and result, from its metrics.
func (b *p8Burst) lookups() (map[string]float64, error) {
	text, err := b.agent.scrape()
	if err != nil {
		return nil, err
	}
	return metricValues(text, "devplumb_agent_cache_lookups_total", "")
}

// run adds all pods at once in mode m, then deletes them, and makes the table's row.
func (b *p8Burst) run(m p8Mode, calls *atomic.Int64) ([]string, error) {
	add := b.burst("add", m, calls)
	records, _ := filepath.Glob(filepath.Join(b.state, "attachments", "*.json"))
	if len(records) != agentBurstPods-add.failed {
		return nil, fmt.Errorf("%d records after %d ADDs, %d failed", len(records), agentBurstPods, add.failed)
	}
	del := b.burst("del", m, calls)
	left, _ := filepath.Glob(filepath.Join(b.state, "attachments", "*.json"))
	addReads, addWrites := splitRequests(add.requests)
	delReads, delWrites := splitRequests(del.requests)
	return []string{m.label, fmt.Sprint(agentBurstPods), fmt.Sprint(add.failed), m.paths(add.paths), add.took.Round(time.Millisecond).String(),
		perCall(int(add.calls), agentBurstPods), fmt.Sprint(add.calls - add.served),
		perCall(addReads, agentBurstPods), perCall(addWrites, agentBurstPods), describeTotal(add.requests),
		fmt.Sprint(del.failed), perCall(delReads, agentBurstPods) + ", " + perCall(delWrites, agentBurstPods),
		fmt.Sprint(len(left))}, nil
}

// burst runs cmd for every pod at once and takes what it cost.
func (b *p8Burst) burst(cmd string, m p8Mode, calls *atomic.Int64) p8Counts {
	if b.rc != nil {
		b.rc.Take()
	}
	calls0, served0 := calls.Load(), b.e.pods.served.Load()
	var c p8Counts
	c.burstResult = burst(b.e, cmd, []string{"p8"}, b.netns, m.env...)
	c.calls, c.served = calls.Load()-calls0, b.e.pods.served.Load()-served0
	if b.rc != nil {
		c.requests = b.rc.Take()
	}
	return c
}

// splitRequests counts a proxy's requests as reads (GET: get, list, watch) and writes
// (everything else); connections are not requests.
func splitRequests(counts map[string]int) (reads, writes int) {
	for k, n := range counts {
		verb, _, _ := strings.Cut(k, " ")
		switch {
		case k == kubeapi.Connections:
		case verb == "GET":
			reads += n
		default:
			writes += n
		}
	}
	return reads, writes
}

// perCall is total ÷ calls, as a table cell.
func perCall(total, calls int) string {
	if calls == 0 {
		return "-"
	}
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", float64(total)/float64(calls)), "0"), ".")
}

// describeTotal is a burst's requests, e.g. "GET pods (metadata) 110, PATCH pods (metadata) 110".
func describeTotal(counts map[string]int) string {
	if kubeapi.Requests(counts) == 0 {
		return "none"
	}
	return strings.ReplaceAll(describeRequests([]map[string]int{counts}), "=", " ")
}

// describeLookups is the agent's cache lookups between two scrapes, e.g.
// "pod hit 150, pod miss 70", or "none".
func describeLookups(before, after map[string]float64) string {
	diff := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			diff[lookupLabel(k)] = d
		}
	}
	return describeCounts(diff)
}

// lookupLabel is `{kind="pod",result="hit"}` as "pod hit".
func lookupLabel(labels string) string {
	var parts []string
	for _, kv := range strings.Split(strings.Trim(labels, "{}"), ",") {
		if _, v, ok := strings.Cut(kv, "="); ok {
			parts = append(parts, strings.Trim(v, `"`))
		}
	}
	return strings.Join(parts, " ")
}
