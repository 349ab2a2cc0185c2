package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// fallbackADDs is the burst the agent is killed in the middle of.
const fallbackADDs = 20

const p9Title = "P9: fallback: the agent killed in the middle of a burst of 20 ADDs"

// p9 kills the agent while 20 ADDs run through it (every one must succeed: the entry point
// falls back to devplumb-direct, which repairs what the agent left), and measures what the
// fallback path costs an ADD: through the agent, against a dead agent's socket (the file
// left, nothing listening) and with no socket at all.
func p9(cfg Config, r *Report) error {
	if cfg.Agent == "" {
		r.Tables = append(r.Tables, Table{Title: p9Title, Notes: []string{"Not run: no devplumb-agent (-agent)."}})
		return nil
	}
	e, err := newEnvWithPods(cfg, podresourcesserver.Config{NoRateLimit: true}, fallbackADDs, 1)
	if err != nil {
		return err
	}
	defer e.close()
	f := &fallbackNode{e: e, state: filepath.Join(e.dir, "state")}
	if err := f.setup(); err != nil {
		return err
	}
	cost, err := f.cost()
	if err != nil {
		return err
	}
	row, err := f.killedBurst()
	if err != nil {
		return err
	}
	r.Tables = append(r.Tables, Table{Title: p9Title,
		Header: []string{"ADDs", "done before the kill", "how each ADD went", "failed ADDs", "complete records after the burst", "all ADDs done in", "failed DELs (no agent)", "records left"},
		Rows:   [][]string{row},
		Notes:  []string{"Target (issue 24): every ADD succeeds. The 20 ADDs (cnitool -> devplumb -> bridge + host-local, one pod each in its own netns, no kubeconfig) start at once through a fresh agent, which gets SIGKILL when the first ADD returns (done before the kill: the ADDs that had returned when the agent was gone). How each went is read from the entry point's one line on stderr when it falls back to devplumb-direct: at connect (the dead agent's socket), lost in prepare, or lost at commit after it ran the delegates (devplumb-direct then undoes them from the shared libcni cache and adds afresh). Then all 20 DELs run at once without an agent."}},
		cost)
	return nil
}

// fallbackNode is P9's node: one network, one netns per pod.
type fallbackNode struct {
	e     *env
	state string
	netns []string
}

func (f *fallbackNode) setup() error {
	if err := f.e.writeNet(f.e.devplumbConf("p9", "10.129.0.0/24", f.state)); err != nil {
		return err
	}
	f.netns = make([]string, fallbackADDs)
	for i := range f.netns {
		var err error
		if f.netns[i], err = f.e.newNetns(); err != nil {
			return err
		}
	}
	return nil
}

// cost times ADD and DEL of one pod by path, in turn: through a live agent, against a
// killed agent's socket, and with no socket.
func (f *fallbackNode) cost() (Table, error) {
	live, err := f.e.startAgent("agent-live", f.e.nodeConfigFlag("p9")...)
	if err != nil {
		return Table{}, err
	}
	dead, err := f.e.startAgent("agent-dead", f.e.nodeConfigFlag("p9")...)
	if err != nil {
		return Table{}, err
	}
	dead.kill()
	paths := []struct {
		label string
		env   []string
		add   []float64
		del   []float64
	}{{label: "through the agent", env: []string{live.env()}}, {label: "fallback: the agent's socket left, the agent dead", env: []string{dead.env()}},
		{label: "no agent: no socket"}}
	const warmup = 2
	for round := range warmup + f.e.cfg.Runs {
		for i := range paths {
			p := &paths[(i+round)%len(paths)]
			add, err := f.e.cnitool("add", "p9", f.netns[0], "net1", podName(0), p.env...)
			if err != nil {
				return Table{}, fmt.Errorf("%s: %w", p.label, err)
			}
			del, err := f.e.cnitool("del", "p9", f.netns[0], "net1", podName(0), p.env...)
			if err != nil {
				return Table{}, fmt.Errorf("%s: %w", p.label, err)
			}
			if round >= warmup {
				p.add, p.del = append(p.add, Ms(add)), append(p.del, Ms(del))
			}
		}
	}
	live.stop()
	t := Table{Title: "P9: what the fallback path costs one ADD (cnitool -> devplumb -> bridge + host-local, no kubeconfig)",
		Header: []string{"path", "ADD", "DEL", "ADD ÷ through the agent"}}
	agentAdd := Summarize(paths[0].add).Median
	for _, p := range paths {
		s := Summarize(p.add)
		t.Rows = append(t.Rows, []string{p.label, s.Format("ms"), Summarize(p.del).Format("ms"), fmt.Sprintf("%.2f", s.Median/agentAdd)})
	}
	t.Notes = []string{"Fallback: the entry point's dial is refused at once (a dead agent's socket file) and it execs devplumb-direct, saying so on stderr; with no socket it execs devplumb-direct silently. Each row's samples alternate with the others'."}
	return t, nil
}

// killedBurst runs fallbackADDs ADDs at once through a fresh agent, kills the agent as the
// first returns, then deletes them all without an agent.
func (f *fallbackNode) killedBurst() ([]string, error) {
	a, err := f.e.startAgent("agent-killed", f.e.nodeConfigFlag("p9")...)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var finished []time.Time
	var killedAt time.Time
	failed := 0
	paths := map[string]int{}
	killed := make(chan struct{})
	start := time.Now()
	for i, ns := range f.netns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, out, err := f.e.cnitoolOutput("add", "p9", ns, "net1", podName(i), a.env())
			mu.Lock()
			defer mu.Unlock()
			paths[fallbackPath(out)]++
			if err != nil {
				failed++
				f.e.cfg.logf("   ADD pod %d: %v", i, err)
			}
			if finished = append(finished, time.Now()); len(finished) == 1 {
				go func() { a.kill(); mu.Lock(); killedAt = time.Now(); mu.Unlock(); close(killed) }()
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	<-killed
	before := 0
	for _, t := range finished {
		if t.Before(killedAt) {
			before++
		}
	}
	total, complete, err := countRecords(f.state)
	if err != nil {
		return nil, err
	}
	if total != complete {
		f.e.cfg.logf("   %d records, %d complete", total, complete)
	}
	delFailed := burst(f.e, "del", []string{"p9"}, f.netns).failed
	left, _, err := countRecords(f.state)
	if err != nil {
		return nil, err
	}
	return []string{fmt.Sprint(fallbackADDs), fmt.Sprint(before), describePaths(paths), fmt.Sprint(failed), fmt.Sprint(complete),
		took.Round(time.Millisecond).String(), fmt.Sprint(delFailed), fmt.Sprint(left)}, nil
}

// countRecords counts devplumb's attachment records in state, and those complete.
func countRecords(state string) (total, complete int, err error) {
	files, err := filepath.Glob(filepath.Join(state, "attachments", "*.json"))
	if err != nil {
		return 0, 0, err
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return 0, 0, err
		}
		var rec struct {
			Complete bool `json:"complete"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return 0, 0, fmt.Errorf("record %s: %w", file, err)
		}
		total++
		if rec.Complete {
			complete++
		}
	}
	return total, complete, nil
}

// The ways an ADD through the entry point went, from what it printed (fallbackPath).
const (
	pathAgent   = "through the agent"
	pathConnect = "fell back at connect"
	pathPrepare = "fell back at prepare"
	pathCommit  = "fell back at commit, its delegates run"
)

// fallbackPath says how an ADD went from the entry point's stderr: its one line when it
// falls back names the agent's failure, and the step (prepare, commit) it was lost in.
func fallbackPath(out []byte) string {
	s := string(out)
	i := strings.Index(s, "; doing the call with devplumb-direct")
	if i < 0 {
		return pathAgent
	}
	line := s[strings.LastIndex(s[:i], "\n")+1 : i]
	switch {
	case strings.Contains(line, "commit"):
		return pathCommit
	case strings.Contains(line, "prepare"):
		return pathPrepare
	}
	return pathConnect
}

// describePaths is e.g. "through the agent 1, fell back at prepare 12, ..." in a fixed order.
func describePaths(n map[string]int) string {
	var parts []string
	for _, p := range []string{pathAgent, pathConnect, pathPrepare, pathCommit} {
		if n[p] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p, n[p]))
		}
	}
	return strings.Join(parts, ", ")
}
