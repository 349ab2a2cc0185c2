package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// p5 runs devplumb ADD and DEL directly with DEVPLUMB_DEBUG=1 and reads the phase
// timings each logs: where the time of a cycle goes, with the state on disk and on tmpfs.
func p5(cfg Config, r *Report) error {
	e, err := newEnvWithPods(cfg, podresourcesserver.Config{NoRateLimit: true}, 1, 1)
	if err != nil {
		return err
	}
	defer e.close()
	netns, err := e.newNetns()
	if err != nil {
		return err
	}
	runs := []*p5Run{{col: "disk", state: filepath.Join(e.dir, "state")}, {col: "tmpfs", state: filepath.Join(e.shm, "state")}}
	if cfg.kube != nil {
		runs = append(runs, &p5Run{col: "disk, with kubeconfig", state: filepath.Join(e.dir, "state-kube"), kube: true})
	}
	for i, run := range runs {
		run.ops = map[string]*opPhases{"ADD": newOpPhases(), "DEL": newOpPhases()}
		conf := e.devplumbConf(fmt.Sprintf("phases%d", i), "10.126.0.0/24", run.state)
		if run.kube {
			if conf, err = e.withKube(conf, podName(0)); err != nil {
				return err
			}
		}
		if run.stdin, run.nodeEnv, err = e.directStdin(conf); err != nil {
			return err
		}
	}
	for i := range cfg.Runs + 2 {
		for _, run := range runs {
			if err := run.cycle(e, netns, fmt.Sprintf("ph%d", i), i >= 2); err != nil {
				return err
			}
		}
	}
	r.Tables = append(r.Tables, p5Table(runs))
	shown := runs[0]
	if last := runs[len(runs)-1]; last.kube {
		shown = last // the whole path, network-status write included
	}
	panel := Panel{Title: "P5: where one devplumb ADD goes (direct call, state on " + shown.col + ")", Unit: "ms"}
	for _, name := range shown.ops["ADD"].order {
		panel.Bars = append(panel.Bars, Bar{Label: "ADD " + name, S: Summarize(shown.ops["ADD"].ms[name])})
	}
	r.Panels = append(r.Panels, panel)
	return nil
}

// p5Run is devplumb with its state in one place.
type p5Run struct {
	col, state string
	kube       bool
	stdin      []byte
	nodeEnv    string // names its node config
	ops        map[string]*opPhases
}

// cycle runs ADD then DEL, keeping their phases unless it is a warm-up.
func (run *p5Run) cycle(e *env, netns, containerID string, keep bool) error {
	for _, op := range []string{"ADD", "DEL"} {
		p, err := runPlugin(e.cfg.Devplumb, append(e.cniEnv(op, netns, containerID, true), run.nodeEnv), run.stdin)
		if err != nil {
			return err
		}
		if keep {
			if err := run.ops[op].add(p); err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
		}
	}
	return nil
}

// outside is the time of the process outside the call's phases.
const outside = "process start, init and exit"

type opPhases struct {
	order []string
	ms    map[string][]float64
}

func newOpPhases() *opPhases { return &opPhases{ms: map[string][]float64{}} }

func (o *opPhases) put(name string, ms float64) {
	if _, ok := o.ms[name]; !ok {
		o.order = append(o.order, name)
	}
	o.ms[name] = append(o.ms[name], ms)
}

func (o *opPhases) add(p proc) error {
	phases, err := parsePhases(p.stderr)
	if err != nil {
		return err
	}
	if len(o.order) == 0 {
		o.order = []string{outside} // first: it comes before the call
	}
	var sum time.Duration
	for _, ph := range phases {
		o.put(ph.name, Ms(ph.d))
		sum += ph.d
	}
	o.ms[outside] = append(o.ms[outside], Ms(p.wall-sum))
	o.put("whole process (wall)", Ms(p.wall))
	return nil
}

type phase struct {
	name string
	d    time.Duration
}

// parsePhases finds devplumb's "msg=phases op=X name=duration..." debug line.
func parsePhases(stderr []byte) ([]phase, error) {
	sc := bufio.NewScanner(bytes.NewReader(stderr))
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, " msg=phases ") {
			continue
		}
		var out []phase
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok || k == "time" || k == "level" || k == "msg" || k == "op" || k == "network" {
				continue
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, fmt.Errorf("phase %s: %w", k, err)
			}
			out = append(out, phase{k, d})
		}
		return out, nil
	}
	return nil, fmt.Errorf("no phases line in devplumb's log: %s", stderr)
}

func p5Table(runs []*p5Run) Table {
	t := Table{Title: "P5: devplumb ADD and DEL by phase (direct call with DEVPLUMB_DEBUG=1): state on disk, on tmpfs, with a kubeconfig",
		Header: []string{"phase"}}
	var names []string
	seen := map[string]bool{}
	for _, op := range []string{"ADD", "DEL"} {
		for _, run := range runs {
			t.Header = append(t.Header, op+" (state on "+run.col+")")
			for _, n := range run.ops[op].order {
				if !seen[n] && n != "whole process (wall)" {
					names, seen[n] = append(names, n), true
				}
			}
		}
	}
	names = append(names, "whole process (wall)")
	for _, n := range names {
		row := []string{n}
		for _, op := range []string{"ADD", "DEL"} {
			for _, run := range runs {
				row = append(row, Summarize(run.ops[op].ms[n]).Format("ms"))
			}
		}
		t.Rows = append(t.Rows, row)
	}
	t.Notes = []string{"config: parse the config and CNI_ARGS; podResources: dial the kubelet socket and Get; claim: the claim under the state lock (ADD: claim and record the delegate run, two writes); deviceInfo: copy or remove the CNI device-info file; delegate: bridge + host-local; networkStatus: build the entry and the result; state: ADD writes the completed record, DEL reads it; kube: build the Kubernetes client and write (DEL: remove) the network-status entry, nothing without a kubeconfig.",
		"The completed ADD keeps its phases up to networkStatus in its state record: devplumbctl inspect shows them."}
	return t
}
