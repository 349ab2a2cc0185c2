package bench

// P10: what one call costs in what does not depend on the machine's load (issue 38):
// instructions (valgrind's callgrind) of the plugin process and of the agent serving it,
// the plugin process's syscalls and its round trips to the agent (strace), devplumb
// through the agent beside the pass-through on the same calls.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// costRuns is how many calls each figure takes the median of: instruction counts vary by a
// few per cent (the Go runtime's threads and GC), and each call under callgrind takes seconds.
const costRuns = 5

// costVariant is one row of P10.
type costVariant struct {
	label string
	net   string
	pod   string
	bin   string // the plugin the network's type names, in e.bin
	agent *agentProc
	netns string
	// per op (ADD, DEL): the samples
	instr, agentInstr, syscalls, trips map[string][]float64
}

func p10(cfg Config, r *Report) error {
	for _, tool := range []string{"valgrind", "callgrind_control", "strace"} {
		if _, err := exec.LookPath(tool); err != nil {
			// Said in the results rather than failing the whole run.
			r.Tables = append(r.Tables, Table{Title: costTitle, Notes: []string{"Not run: P10 counts instructions " +
				"with valgrind and syscalls with strace (Debian packages valgrind, strace): " + err.Error()}})
			return nil
		}
	}
	e, err := newEnv(cfg, podresourcesserver.Config{NoRateLimit: true})
	if err != nil {
		return err
	}
	defer e.close()
	if err := e.pods.set(p1MaxVariants, 1); err != nil {
		return err
	}
	vs, err := costVariants(e)
	if err != nil {
		return err
	}
	for _, v := range vs {
		if err := v.measure(e); err != nil {
			return fmt.Errorf("%s: %w", v.label, err)
		}
	}
	r.Tables = append(r.Tables, costTable(vs))
	if keep := os.Getenv("DEVPLUMB_COST_KEEP"); keep != "" {
		// The raw callgrind and strace files, for callgrind_annotate: the env's dir goes.
		if out, err := exec.Command("cp", "-a", e.dir, keep).CombinedOutput(); err != nil {
			return fmt.Errorf("keep P10's files in %s: %w: %s", keep, err, out)
		}
	}
	return nil
}

// costVariants writes P10's networks and starts its agents under callgrind.
func costVariants(e *env) ([]*costVariant, error) {
	state := filepath.Join(e.dir, "state")
	nets := []p1Net{
		{label: "Go pass-through meta-plugin", conf: map[string]any{"cniVersion": "1.0.0", "name": "cpass", "type": "passthrough",
			"cacheDir": filepath.Join(e.dir, "passthrough"), "delegate": e.bridge("10.127.0.0/24")}, skip: e.cfg.Passthrough == ""},
		{label: "devplumb via the agent", conf: e.devplumbConf("cagent", "10.127.1.0/24", state), skip: e.cfg.Agent == "", agent: true},
		{label: "devplumb via the agent + network-status (API)", conf: e.devplumbConf("cagentkube", "10.127.2.0/24", state),
			skip: e.cfg.Agent == "" || e.cfg.kube == nil, kube: true, agent: true},
		{label: "devplumb via the agent + DRA claim's networkData and network-status (API)",
			conf: e.devplumbConf("cagentdra", "10.127.3.0/24", state), skip: e.cfg.Agent == "" || e.cfg.kube == nil,
			dra: "p10-dra", agent: true},
	}
	var vs []*costVariant
	for i, n := range nets {
		if n.skip {
			continue
		}
		v := &costVariant{label: n.label, net: n.conf["name"].(string), pod: podName(i), bin: n.conf["type"].(string)}
		pv := &variant{net: v.net, pod: v.pod}
		if err := p1Prepare(e, n, pv); err != nil {
			return nil, err
		}
		v.pod = pv.pod
		if n.agent {
			a, err := e.startCostAgent(v)
			if err != nil {
				return nil, err
			}
			v.agent = a
		}
		var err error
		if v.netns, err = e.newNetns(); err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// startCostAgent starts an agent for v's node config under callgrind, collecting nothing
// until measure zeroes its counters.
func (e *env) startCostAgent(v *costVariant) (*agentProc, error) {
	kc := ""
	if e.cfg.kube != nil {
		kc = e.cfg.kube.srv.Kubeconfig
	}
	dir := filepath.Join(e.dir, "cost-"+v.net)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	wrapper := filepath.Join(dir, "agent-callgrind")
	script := fmt.Sprintf("#!/bin/sh\nexport GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off; exec valgrind --tool=callgrind -q --callgrind-out-file=%s/agent.%%p.cg %s \"$@\"\n",
		dir, mustAbs(e.cfg.Agent))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return nil, err
	}
	cfg := e.cfg
	cfg.Agent = wrapper
	return e.keep(startAgent(cfg, filepath.Join(dir, "agent"), append(agentFlags(e.cfg, kc), e.nodeConfigFlag(v.net)...)...))
}

func mustAbs(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// measure runs v's calls: two plain cycles to warm the agent, then costRuns cycles with
// the plugin under callgrind and costRuns under strace.
func (v *costVariant) measure(e *env) error {
	v.instr, v.agentInstr, v.syscalls, v.trips = map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	env := []string{}
	if v.agent != nil {
		env = append(env, v.agent.env())
	}
	for range 2 {
		if _, err := e.cnitool("add", v.net, v.netns, "net1", v.pod, env...); err != nil {
			return err
		}
		if _, err := e.cnitool("del", v.net, v.netns, "net1", v.pod, env...); err != nil {
			return err
		}
	}
	real := filepath.Join(e.bin, v.bin+".real")
	link := filepath.Join(e.bin, v.bin)
	target, err := os.Readlink(link)
	if err != nil {
		return err
	}
	if err := os.Rename(link, real); err != nil {
		return err
	}
	defer func() { _ = os.Remove(link); _ = os.Symlink(target, link) }()
	for _, tool := range []string{"callgrind", "strace"} {
		out := filepath.Join(e.dir, "cost-"+v.net+"-"+tool)
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := writeCostWrapper(link, real, tool, out); err != nil {
			return err
		}
		for i := range costRuns {
			for _, op := range []string{"add", "del"} {
				if err := v.measureRetried(e, env, tool, op, filepath.Join(out, fmt.Sprintf("%s-%d", op, i))); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// writeCostWrapper makes link a script running real under tool, its output under out
// in the file $DEVPLUMB_COST_OUT names.
func writeCostWrapper(link, real, tool, out string) error {
	_ = os.Remove(link)
	var run string
	switch tool {
	case "callgrind":
		run = "export GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off; exec valgrind --tool=cachegrind --cache-sim=no -q --cachegrind-out-file=\"$DEVPLUMB_COST_OUT\".cg " + real + " \"$@\""
	default:
		run = "exec strace -f -ff -qq -ttt -T -o \"$DEVPLUMB_COST_OUT\".st " + real + " \"$@\""
	}
	return os.WriteFile(link, []byte("#!/bin/sh\n"+run+"\n"), 0o755)
}

// errFellBack is matched by measureOne's error for a call devplumb-direct did.
var errFellBack = errors.New("the entry point fell back to devplumb-direct")

// costAttempts bounds the tries of one measured call.
const costAttempts = 3

// agentGone is measureOne's error when the agent under callgrind exited around the
// call (valgrind's callgrind aborts now and then on a signal the Go runtime takes):
// before it (ran false: the call did not run) or after it, when its counters were read.
type agentGone struct {
	ran bool
	err error
}

func (g *agentGone) Error() string {
	return fmt.Sprintf("the agent under callgrind exited: %v", g.err)
}

func (g *agentGone) Unwrap() error { return g.err }

// goneBound bounds the wait for an agent whose callgrind_control failed to be seen
// exiting: a callgrind that aborts takes its process with it at once.
const goneBound = 2 * time.Second

// goneOr is err as an *agentGone when v's agent has exited (or exits within goneBound),
// else err itself.
func (v *costVariant) goneOr(err error, ran bool) error {
	select {
	case <-v.agent.exited:
		return &agentGone{ran: ran, err: err}
	case <-time.After(goneBound):
		return err
	}
}

// measureRetried is measureOne, tried again when the call fell back to devplumb-direct
// (under valgrind the agent may miss the entry point's 1 s hello bound, and a call
// devplumb-direct did counts no agent path) or the agent under callgrind exited. A call
// that ran did its work, so the opposite call (unmeasured) puts the attachment back as
// it was before the next try.
func (v *costVariant) measureRetried(e *env, env []string, tool, op, out string) error {
	undo := map[string]string{"add": "del", "del": "add"}[op]
	for attempt := 1; ; attempt++ {
		err := v.measureOne(e, env, tool, op, out)
		var gone *agentGone
		if !(errors.Is(err, errFellBack) || errors.As(err, &gone)) || attempt == costAttempts {
			return err
		}
		restarted, err := v.restartIfGone(e)
		if err != nil {
			return err
		}
		if err := v.undoTried(e, env, op, undo, out, gone == nil || gone.ran); err != nil {
			return err
		}
		if restarted { // the new agent warmed as measure warmed the first
			for _, warm := range []string{op, undo} {
				if _, err := e.cnitool(warm, v.net, v.netns, "net1", v.pod, append(env, "DEVPLUMB_COST_OUT="+out+"-warm")...); err != nil {
					return fmt.Errorf("%s to warm the restarted agent: %w", warm, err)
				}
			}
		}
		tried, err := filepath.Glob(out + ".*")
		if err != nil {
			return err
		}
		for _, f := range tried {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
}

// restartIfGone starts v's agent again when it exited: valgrind's callgrind aborts now
// and then on a signal the Go runtime takes (its assertion in vgCallgrind_post_signal,
// seen under load), and the tries left need an agent to count.
func (v *costVariant) restartIfGone(e *env) (bool, error) {
	select {
	case <-v.agent.exited:
	default:
		return false, nil
	}
	e.cfg.logf("   %s: the agent under callgrind exited (%v); starting it again. Its log's end:\n%s",
		v.label, v.agent.err, tailFile(v.agent.log, 5))
	a, err := e.startCostAgent(v)
	if err != nil {
		return false, fmt.Errorf("restart the agent: %w", err)
	}
	v.agent = a
	return true, nil
}

// undoTried runs undo (unmeasured) after a try of op that ran, and nothing after one
// that did not.
func (v *costVariant) undoTried(e *env, env []string, op, undo, out string, ran bool) error {
	if !ran {
		return nil
	}
	if _, err := e.cnitool(undo, v.net, v.netns, "net1", v.pod, append(env, "DEVPLUMB_COST_OUT="+out+"-undone")...); err != nil {
		return fmt.Errorf("%s after a %s that was not counted: %w", undo, op, err)
	}
	return nil
}

func (v *costVariant) measureOne(e *env, env []string, tool, op, out string) error {
	key := strings.ToUpper(op)
	if v.agent != nil && tool == "callgrind" {
		if err := callgrindControl("-z", v.agent); err != nil {
			return v.goneOr(err, false)
		}
	}
	_, printed, err := e.cnitoolOutput(op, v.net, v.netns, "net1", v.pod, append(env, "DEVPLUMB_COST_OUT="+out)...)
	if err != nil {
		return err
	}
	if path := fallbackPath(printed); v.agent != nil && path != pathAgent {
		return fmt.Errorf("%w: %s %s of %s %s, so it counts no agent path: %s", errFellBack, tool, op, v.net, path, printed)
	}
	if tool == "strace" {
		n, trips, err := straceCounts(out+".st", v.agent)
		if err != nil {
			return err
		}
		v.syscalls[key] = append(v.syscalls[key], float64(n))
		v.trips[key] = append(v.trips[key], float64(trips))
		return nil
	}
	n, err := callgrindTotal(out + ".cg")
	if err != nil {
		return err
	}
	v.instr[key] = append(v.instr[key], float64(n))
	if v.agent != nil {
		n, err := v.agentInstructions()
		if err != nil {
			return v.goneOr(err, true)
		}
		v.agentInstr[key] = append(v.agentInstr[key], float64(n))
	}
	return nil
}

// costTable is P10's table: each figure the median of its calls, with its ratio to the
// pass-through's.
func costTable(vs []*costVariant) Table {
	t := Table{Title: costTitle,
		Header: []string{"what", "op", "plugin process instructions", "÷ pass-through's", "agent instructions",
			"(plugin + agent) ÷ pass-through's", "plugin syscalls", "÷ pass-through's", "round trips to the agent"}}
	var pass *costVariant
	if len(vs) > 0 && vs[0].agent == nil {
		pass = vs[0]
	}
	for _, v := range vs {
		for _, op := range []string{"ADD", "DEL"} {
			in, ag, sc := median(v.instr[op]), median(v.agentInstr[op]), median(v.syscalls[op])
			row := []string{v.label, op, fmt.Sprintf("%.1f M", in/1e6), "–", "–", "–", fmt.Sprintf("%.0f", sc), "–",
				fmt.Sprintf("%.0f", median(v.trips[op]))}
			if v.agent != nil {
				row[4] = fmt.Sprintf("%.1f M", ag/1e6)
			}
			if pass != nil {
				p := median(pass.instr[op])
				row[3] = fmt.Sprintf("%.2f", in/p)
				row[5] = fmt.Sprintf("%.2f", (in+ag)/p)
				row[7] = fmt.Sprintf("%.2f", sc/median(pass.syscalls[op]))
			}
			t.Rows = append(t.Rows, row)
		}
	}
	t.Notes = []string{
		"Instructions do not depend on the machine's load, so this table holds on a shared machine where P1's milliseconds do not. " +
			"Each figure is the median of " + strconv.Itoa(costRuns) + " calls (cnitool -> the plugin -> bridge + host-local in a netns), after two cycles that warm the agent.",
		"Plugin process: the process the runtime starts (devplumb's entry point, or the pass-through), under valgrind (cachegrind) " +
			"(GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off: valgrind 3.19 aborts on the Go runtime's preemption signals and its RDTSCP) " +
			"without its delegates (they run natively); its syscalls are its own threads' under strace -f, the delegates' left out. " +
			"Agent: the devplumb-agent serving the call, under callgrind for the whole step, its counters zeroed before the call and " +
			"dumped after it answers (work it leaves for after the answer, as DEL's network-status removal, is counted only as far as it ran by then).",
		"Round trips: the requests the entry point writes on the agent's socket.",
	}
	return t
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
