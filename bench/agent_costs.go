package bench

// Where P1's time through the agent goes (issue 38): the agent's own phase histograms and
// the API server's request durations, each read before and after P1's measured rounds, so
// the breakdown covers exactly the cycles the medians come from.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
)

// sums are histograms' sums (seconds) and counts by their label values.
type sums map[string]struct{ sum, count float64 }

// histSums reads the histogram name from a Prometheus text exposition: sum and count of
// each series, keyed by key's rendering of its labels.
func histSums(text, name string, key func(labels map[string]string) string) (sums, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := sums{}
	fam := fams[name]
	if fam == nil {
		return out, nil
	}
	for _, m := range fam.GetMetric() {
		k := key(labelMap(m))
		if k == "" {
			continue
		}
		s := out[k]
		s.sum += m.GetHistogram().GetSampleSum()
		s.count += float64(m.GetHistogram().GetSampleCount())
		out[k] = s
	}
	return out, nil
}

func labelMap(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// since is s less an earlier reading of the same series.
func (s sums) since(before sums) sums {
	out := sums{}
	for k, v := range s {
		b := before[k]
		v.sum -= b.sum
		v.count -= b.count
		out[k] = v
	}
	return out
}

// meanMs is series k's mean in milliseconds (0 when it has no sample).
func (s sums) meanMs(k string) float64 {
	v := s[k]
	if v.count == 0 {
		return 0
	}
	return 1000 * v.sum / v.count
}

// agentPhases reads agent a's phase histograms for network net, keyed "op phase".
func agentPhases(a *agentProc, net string) (sums, error) {
	text, err := a.scrape()
	if err != nil {
		return nil, err
	}
	return histSums(text, "devplumb_phase_duration_seconds", func(l map[string]string) string {
		if l["network"] != net || l["path"] != "agent" {
			return ""
		}
		return l["op"] + " " + l["phase"]
	})
}

// apiserverDurations reads the API server's own time per request, keyed "VERB
// resource[/subresource]".
func apiserverDurations(k *kubeNode) (sums, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := k.srv.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	return histSums(string(raw), "apiserver_request_duration_seconds", func(l map[string]string) string {
		r := l["resource"]
		if l["subresource"] != "" {
			r += "/" + l["subresource"]
		}
		return l["verb"] + " " + r
	})
}

// helloGap is the pause between the hello round trips helloTime times: a call's
// round trips find the agent idle, as the pod starts of a node do.
const helloGap = 20 * time.Millisecond

// helloTime is the median of runs connections with a hello round trip to agent a from
// this process (already running, unlike an entry point), helloGap apart.
func helloTime(a *agentProc, runs int) (float64, error) {
	var ms []float64
	for range runs {
		time.Sleep(helloGap)
		start := time.Now()
		c, err := agentproto.Dial(a.socket, time.Second, "bench")
		if err != nil {
			return 0, fmt.Errorf("hello: %w", err)
		}
		ms = append(ms, Ms(time.Since(start)))
		c.Close()
	}
	return Summarize(ms).Median, nil
}

// p1Costs is P1's readings before and after its measured rounds.
type p1Costs struct {
	agents    map[*variant]sums // the agent rows' phases
	hello     float64           // ms of a connection and hello to the plain row's agent (read after)
	apiserver sums
	serverCPU float64 // seconds of CPU kube-apiserver and etcd have used
	at        time.Time
	idle      float64 // their CPU seconds per second with no call running (read before the rounds)
}

// idleBound is how long readBefore watches the API server with no call running.
const idleBound = 2 * time.Second

// idleCPU watches the API server's processes for idleBound with no call running: their
// CPU seconds per second then (leases, controllers).
func idleCPU(k *kubeNode) (float64, error) {
	start, err := serverCPU(k)
	if err != nil {
		return 0, err
	}
	time.Sleep(idleBound)
	end, err := serverCPU(k)
	if err != nil {
		return 0, err
	}
	return (end - start) / idleBound.Seconds(), nil
}

// serverCPU is the CPU time (seconds) the API server's processes have used.
func serverCPU(k *kubeNode) (float64, error) {
	var total float64
	for _, pid := range k.srv.PIDs() {
		p, err := procfs.NewProc(pid)
		if err == nil {
			var st procfs.ProcStat
			if st, err = p.Stat(); err == nil {
				total += st.CPUTime()
			}
		}
		if err != nil {
			return 0, fmt.Errorf("CPU time of process %d: %w", pid, err)
		}
	}
	return total, nil
}

// readCosts reads every agent row's phases, the API server's durations and its
// processes' CPU time.
func readCosts(e *env, vs []*variant) (*p1Costs, error) {
	c := &p1Costs{agents: map[*variant]sums{}}
	for _, v := range vs {
		if v.agentProc == nil {
			continue
		}
		s, err := agentPhases(v.agentProc, v.net)
		if err != nil {
			return nil, err
		}
		c.agents[v] = s
	}
	if k := e.cfg.kube; k != nil {
		s, err := apiserverDurations(k)
		if err != nil {
			return nil, err
		}
		c.apiserver = s
		if c.serverCPU, err = serverCPU(k); err != nil {
			return nil, err
		}
	}
	c.at = time.Now()
	return c, nil
}

// readBefore is readCosts before the measured rounds, with the API server's idle CPU
// rate, watched first with no call running.
func readBefore(e *env, vs []*variant) (*p1Costs, error) {
	idle := 0.0
	if k := e.cfg.kube; k != nil {
		var err error
		if idle, err = idleCPU(k); err != nil {
			return nil, err
		}
	}
	c, err := readCosts(e, vs)
	if err != nil {
		return nil, err
	}
	c.idle = idle
	return c, nil
}

// readAfter is readCosts after the measured rounds, with a hello round trip to the plain
// row's agent timed once they are done.
func readAfter(e *env, vs []*variant) (*p1Costs, error) {
	c, err := readCosts(e, vs)
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		if v.net == "dpagent" && v.agentProc != nil {
			if c.hello, err = helloTime(v.agentProc, 30); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// costsTable breaks each agent row's time over the pass-through down: the agent's own
// work, the API writes it waits for, and the rest (the entry point's own process beyond
// the pass-through's, its round trips to the agent, the scheduling of two processes).
func costsTable(vs []*variant, before, after *p1Costs, floor, pass float64) *Table {
	passRow := variantOf(vs, "pass")
	if before == nil || passRow == nil || len(after.agents) == 0 {
		return nil
	}
	t := &Table{Title: "P1 through the agent: where the time over the pass-through goes (per ADD+DEL cycle)",
		Header: []string{"row", "over the pass-through (paired median)", "its 95% interval (rounds)", "the agent's own work (mean)",
			"waiting for the API server (mean)", "the rest (entry point, round trips)", "its target over the pass-through",
			"the agent's phases (ADD; DEL), ms"}}
	for _, v := range vs {
		s, ok := after.agents[v]
		if !ok {
			continue
		}
		s = s.since(before.agents[v])
		paired := pairedOverPass(v, passRow)
		over := paired.Median
		own, kube := 0.0, s.meanMs("ADD kube")+s.meanMs("DEL kube")
		for k := range s {
			if !strings.HasSuffix(k, " delegate") && !strings.HasSuffix(k, " kube") {
				own += s.meanMs(k)
			}
		}
		t.Rows = append(t.Rows, []string{v.label, fmt.Sprintf("%.1f ms", over), fmt.Sprintf("%s (%d)", paired.Interval(), paired.N), fmt.Sprintf("%.1f ms", own),
			fmt.Sprintf("%.1f ms", kube), fmt.Sprintf("%.1f ms", over-own-kube), costTarget(v, floor+pass, paired), phaseList(s)})
	}
	t.Notes = append(t.Notes, "Over the pass-through: the median of the differences between the row's cycle and the pass-through's "+
		"in the same round, so that the machine's load, which drifts between rounds, cancels out; from the rounds after P1's "+
		"in which only the pass-through and the rows through the agent run, each once a round in a rotating order (-pairs), "+
		"else from P1's own rounds. The interval holds that median with 95% confidence (order statistics, no assumption on "+
		"the differences' distribution). A target is met when the whole interval is within it, missed when the whole interval "+
		"is above it, and not decided by the run otherwise. The other columns are P1's own rounds'.")
	t.Notes = append(t.Notes, "Means over the measured cycles of the agent's own phase histograms (devplumb_phase_duration_seconds, path=\"agent\"): "+
		"its own work is every phase but the delegates' run (which the entry point does, as the pass-through does) and the API writes; "+
		"waiting for the API server is the kube phase: ADD's network-status PATCH (and the claim's status apply, at the same time), "+
		"DEL's removal of the claim's entry (the pod's goes after DEL answers).")
	if after.hello > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("Part of the rest: a connection and hello round trip to the idle agent takes %.2f ms "+
			"(median of 30, %v apart, from a process already running); an ADD makes three round trips (hello, prepare, commit), "+
			"a DEL two (its prepare goes with the hello), each waking the agent and then the entry point.", after.hello, helloGap))
	}
	if n := apiserverNote(before, after); n != "" {
		t.Notes = append(t.Notes, n)
	}
	for _, n := range []string{leastAgentNote(vs, floor, pass), leastAgentWorkNote(vs, floor+pass), leastStatusNote(vs, floor, pass)} {
		if n != "" {
			t.Notes = append(t.Notes, n)
		}
	}
	return t
}

// leastAgentNote compares the plain row through the agent with the pass-through making
// the same round trips to an agent that does nothing (idleagent.go): what is left of
// the row's target for the agent's own work.
func leastAgentNote(vs []*variant, floor, pass float64) string {
	l, a := addedOf(vs, "passagent", floor), addedOf(vs, "dpagent", floor)
	if l < 0 || a < 0 {
		return ""
	}
	passCycle := floor + pass
	return fmt.Sprintf("The least an agent-based meta-plugin costs here, measured as the pass-through with one P making the "+
		"agent protocol's round trips (connect and hello, prepare, commit; a DEL's prepare with its hello) to an agent that "+
		"answers at once and does nothing else: %.1f ms over the pass-through (%.2f ×). The plain row through the agent is "+
		"%.1f ms over that (%.2f × it): the agent's own work and the entry point's (the node config, the answers' checks). "+
		"Its 1.05 × target leaves %.1f ms over that least for them.%s",
		l-pass, (floor+l)/passCycle, a-l, (floor+a)/(floor+l), 1.05*passCycle-floor-l, pairedLeast(vs))
}

// pairedLeast is what the paired rounds (p1Pairs) say of the least an agent-based
// meta-plugin costs: its paired time over the pass-through, and the plain row's over it.
func pairedLeast(vs []*variant) string {
	pass, least, row := variantOf(vs, "pass"), variantOf(vs, "passagent"), variantOf(vs, "dpagent")
	if pass == nil || least == nil || row == nil || len(least.paired) == 0 || len(pass.paired) == 0 || len(row.paired) == 0 {
		return ""
	}
	l, a := PairedDiff(least.paired, pass.paired), PairedDiff(row.paired, least.paired)
	return fmt.Sprintf(" In the %d paired rounds: that least %.1f ms over the pass-through (95%% interval %s), "+
		"the plain row %.1f ms over that least (%s).", l.N, l.Median, l.Interval(), a.Median, a.Interval())
}

// leastAgentWorkNote compares each row through the agent with the pass-through making
// the same round trips to the idle agent doing only that row's own work (idleagent.go,
// idlerecords.go): the least an agent-based meta-plugin doing that work costs, and
// whether that least meets the row's target itself.
func leastAgentWorkNote(vs []*variant, passCycle float64) string {
	pass := variantOf(vs, "pass")
	if pass == nil {
		return ""
	}
	var parts []string
	for _, p := range []struct{ least, row, what string }{
		{"passagentrecords", "dpagent", "keeping the records, for the plain row"},
		{"passagentstatus", "dpagentkube", "with network-status"},
		{"passagentdra", "dpdraagent", "with a DRA claim's networkData and network-status"},
	} {
		least, row := variantOf(vs, p.least), variantOf(vs, p.row)
		if least == nil || row == nil {
			continue
		}
		f := targetFactor(p.row)
		l, target := pairedOverPass(least, pass), (f-1)*passCycle
		a := pairedOverPass(row, least)
		parts = append(parts, fmt.Sprintf("%s, %.1f ms over the pass-through (95%% interval %s; %d rounds), against "+
			"the row's %.2f × target (%.1f ms) that least alone: %s; the row through the agent %.1f ms over that least (%s)",
			p.what, l.Median, l.Interval(), l.N, f, target, l.Within(target), a.Median, a.Interval()))
	}
	if len(parts) == 0 {
		return ""
	}
	return "The least an agent-based meta-plugin doing a row's own work costs here, measured as the pass-through with " +
		"one P making the agent protocol's round trips to an agent that does only that work: keeping the records (an ADD's " +
		"PodResources Get; under the state lock its record, with a device no other record holds, written before the delegates " +
		"run; the device-info file copied; the record completed in its commit; a DEL's record read, then, under the lock, " +
		"rewritten as undone and removed with its device-info file: the records crash safety and the one-device rule stand " +
		"on, on the same disk as devplumb's, with nothing else), or only the API writes, in its commit (the status daemon's, " +
		"below: an ADD's before it answers; a DEL's claim entry before and its pod entry after); paired as the rows are: " +
		strings.Join(parts, "; ") + "."
}

// leastStatusNote compares the API rows through the agent with the pass-through that
// makes the same writes by a warm daemon (statusd.go): the least each row could cost
// here, API server and all.
func leastStatusNote(vs []*variant, floor, pass float64) string {
	passCycle := floor + pass
	var parts []string
	for _, p := range []struct{ least, agent, what string }{
		{"passstatus", "dpagentkube", "network-status"},
		{"passdra", "dpdraagent", "a DRA claim's networkData and network-status"},
	} {
		l, a := addedOf(vs, p.least, floor), addedOf(vs, p.agent, floor)
		if l < 0 || a < 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("with %s, %.1f ms over the pass-through (%.2f ×; added ÷ Multus thick's %s), "+
			"and the row through the agent %.1f ms over that (%.2f × it)", p.what, l-pass, (floor+l)/passCycle,
			ratio(l, addedOf(vs, "multusthick", floor), false), a-l, (floor+a)/(floor+l)))
	}
	if len(parts) == 0 {
		return ""
	}
	plain := "not run"
	if a := addedOf(vs, "dpagent", floor); a >= 0 {
		plain = fmt.Sprintf("%.1f ms over the pass-through (%.2f ×)", a-pass, (floor+a)/passCycle)
	}
	return "The least a meta-plugin that writes to the API server before ADD returns costs here, measured as the pass-through " +
		"handing its result to a warm daemon that makes only the writes (one merge PATCH of the pod; the claim's status " +
		"applied at the same time, and taken away before DEL answers): " + strings.Join(parts, "; ") +
		". The plain row is " + plain + "."
}

// pairedOverPass is v's paired time over the pass-through: from the paired rounds
// (p1Pairs) when they ran, else from P1's own.
func pairedOverPass(v, pass *variant) Paired {
	if len(v.paired) > 0 && len(pass.paired) > 0 {
		return PairedDiff(v.paired, pass.paired)
	}
	return PairedDiff(v.ms, pass.ms)
}

// costTarget is issue 38's target for the row as time over the pass-through, and whether
// the row's paired time over it meets it.
func costTarget(v *variant, passCycle float64, over Paired) string {
	f := targetFactor(v.net)
	target := (f - 1) * passCycle
	return fmt.Sprintf("≤ %.1f ms (%.2f ×): %s", target, f, over.Within(target))
}

// phaseList is the mean of each phase but the delegates' run, in ADD's order.
func phaseList(s sums) string {
	order := []string{"config", "podResources", "claim", "deviceInfo", "networkStatus", "state", "kube"}
	var parts []string
	for _, op := range []string{"ADD", "DEL"} {
		var p []string
		for _, ph := range order {
			if _, ok := s[op+" "+ph]; ok {
				p = append(p, fmt.Sprintf("%s %.2f", ph, s.meanMs(op+" "+ph)))
			}
		}
		parts = append(parts, strings.Join(p, ", "))
	}
	return strings.Join(parts, "; ")
}

// writeCPU is the CPU the API server's processes used between the readings beyond their
// idle rate.
func writeCPU(before, after *p1Costs) float64 {
	return after.serverCPU - before.serverCPU - before.idle*after.at.Sub(before.at).Seconds()
}

// writeVerbs are the API server's verbs that write.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true}

// apiserverNote is the API server's own time per write in the measured rounds: the part
// of the wait no client saves.
func apiserverNote(before, after *p1Costs) string {
	if after.apiserver == nil {
		return ""
	}
	s := after.apiserver.since(before.apiserver)
	var parts []string
	var writes float64
	for _, k := range slices.Sorted(maps.Keys(s)) {
		verb, _, _ := strings.Cut(k, " ")
		if !writeVerbs[verb] || s[k].count == 0 {
			continue
		}
		writes += s[k].count
		parts = append(parts, fmt.Sprintf("%s %.1f ms (%d requests)", k, s.meanMs(k), int(s[k].count)))
	}
	if writes == 0 {
		return ""
	}
	return fmt.Sprintf("The API server's own time per write in the same cycles, all rows (apiserver_request_duration_seconds): %s; "+
		"the least a client that writes before ADD returns waits. kube-apiserver and etcd used %.1f ms of CPU per write "+
		"beyond their idle use, on the CPUs the cycles run on (a cluster's control plane runs elsewhere), which is what the API rows' rest "+
		"has beyond the plain row's: each cycle of the network-status row makes two writes (ADD's PATCH and DEL's, which runs after DEL answers).",
		strings.Join(parts, ", "), 1000*writeCPU(before, after)/writes)
}

// targetFactor is issue 38's target for the row through the agent of network net, as a
// factor of the pass-through's cycle.
func targetFactor(net string) float64 {
	switch net {
	case "dpagentkube":
		return 1.10
	case "dpdraagent":
		return 1.15
	}
	return 1.05
}
