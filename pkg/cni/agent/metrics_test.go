package agent

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
)

// The agent counts each request by outcome, and hands each ADD's and DEL's
// phase timings to Config.Phases (the node's histograms) instead of a spool.
func TestAgentMetricsAndPhases(t *testing.T) {
	var mu sync.Mutex
	var got []phasespool.Record
	e := newAgentEnv(t, 1, Config{Phases: func(r phasespool.Record) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
	}})
	for _, cmd := range []string{agentproto.CmdAdd, agentproto.CmdDel} {
		if o := e.call(cmd, "net1"); o.Err != nil || o.Committed == nil || o.Committed.Error != nil {
			t.Fatalf("%s: %+v, %v", cmd, o.Committed, o.Err)
		}
	}
	e.prepareAndRun("net1") // its connection stays open: the call stays pending
	other, err := agentproto.Dial(e.socket, 5*time.Second, "entry-test")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Commit(t.Context(), &agentproto.Commit{Attachment: "unknown"}); err == nil {
		t.Fatal("commit of an unknown call: no error")
	}
	want := `
# HELP devplumb_agent_pending_calls Prepared calls waiting for their commit or rollback.
# TYPE devplumb_agent_pending_calls gauge
devplumb_agent_pending_calls 1
`
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.agent.Collectors()...)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "devplumb_agent_pending_calls"); err != nil {
		t.Error(err)
	}
	for labels, n := range map[[3]string]float64{
		{"prepare", "ADD", "ok"}: 2, {"commit", "ADD", "ok"}: 1, {"prepare", "DEL", "ok"}: 1,
		{"commit", "DEL", "ok"}: 1, {"commit", "", "agent-error"}: 1,
	} {
		if v := testutil.ToFloat64(e.agent.metrics.requests.WithLabelValues(labels[:]...)); v != n {
			t.Errorf("requests %v: %v, want %v", labels, v, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].Op != "ADD" || got[1].Op != "DEL" || got[0].Failed || len(got[0].Phases) == 0 {
		t.Errorf("phase records %+v: want the ADD's and the DEL's", got)
	}
}
