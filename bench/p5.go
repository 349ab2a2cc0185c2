package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim/prserver"
)

// p5 runs devplumb ADD and DEL directly with DEVPLUMB_DEBUG=1 and reads the phase
// timings each logs: where the time of a cycle goes.
func p5(cfg Config, r *Report) error {
	e, err := newEnv(cfg, prserver.Config{NoRateLimit: true})
	if err != nil {
		return err
	}
	defer e.close()
	if err := e.pods.set(1, 1); err != nil {
		return err
	}
	stdin, err := json.Marshal(e.devplumbConf("phases", "10.126.0.0/24", filepath.Join(e.dir, "state")))
	if err != nil {
		return err
	}
	netns, err := e.newNetns()
	if err != nil {
		return err
	}
	ops := map[string]*opPhases{"ADD": newOpPhases(), "DEL": newOpPhases()}
	for i := range cfg.Runs + 2 {
		for _, op := range []string{"ADD", "DEL"} {
			p, err := runPlugin(cfg.Devplumb, e.cniEnv(op, netns, fmt.Sprintf("ph%d", i), true), stdin)
			if err != nil {
				return err
			}
			if i >= 2 { // warm-up
				if err := ops[op].add(p); err != nil {
					return fmt.Errorf("%s: %w", op, err)
				}
			}
		}
	}
	r.Tables = append(r.Tables, p5Table(ops))
	panel := Panel{Title: "P5: where one devplumb ADD goes (direct call, no cnitool)", Unit: "ms"}
	for _, name := range ops["ADD"].order {
		panel.Bars = append(panel.Bars, Bar{Label: "ADD " + name, S: Summarize(ops["ADD"].ms[name])})
	}
	r.Panels = append(r.Panels, panel)
	return nil
}

// outside is the time of the process outside the call's phases.
const outside = "process start, Go runtime and package init, exit"

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
			if !ok || k == "time" || k == "level" || k == "msg" || k == "op" {
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

func p5Table(ops map[string]*opPhases) Table {
	t := Table{Title: "P5: devplumb ADD and DEL by phase (direct call with DEVPLUMB_DEBUG=1)", Header: []string{"phase", "ADD", "DEL"}}
	var names []string
	seen := map[string]bool{}
	for _, op := range []string{"ADD", "DEL"} {
		for _, n := range ops[op].order {
			if !seen[n] && n != "whole process (wall)" {
				names, seen[n] = append(names, n), true
			}
		}
	}
	names = append(names, "whole process (wall)")
	for _, n := range names {
		t.Rows = append(t.Rows, []string{n, Summarize(ops["ADD"].ms[n]).Format("ms"), Summarize(ops["DEL"].ms[n]).Format("ms")})
	}
	t.Notes = []string{"config: parse the config and CNI_ARGS; podResources: dial the kubelet socket and Get; claim: the claim under the state lock (ADD: claim and record the delegate run, two writes); deviceInfo: copy or remove the CNI device-info file; delegate: bridge + host-local; networkStatus: build the entry and the result; state: ADD writes the completed record, DEL reads it; kube: the API server write (no kubeconfig here: nothing).",
		"The completed ADD keeps its phases up to networkStatus in its state record: devplumbctl inspect shows them."}
	return t
}
