package plugin

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
)

// The timed steps of ADD and DEL, in the order ADD runs them.
const (
	phaseConfig       = "config"       // parse the config and CNI_ARGS
	phasePodResources = "podResources" // ask the kubelet for the pod's devices
	// phaseTake: take (or release) the device under the state lock. Its name
	// stays "claim": it is a Prometheus label value and in recorded state.
	phaseTake          = "claim"
	phaseDeviceInfo    = "deviceInfo"    // copy (or remove) the CNI device-info file
	phaseDelegate      = "delegate"      // the delegate plugins' ADD (or DEL)
	phaseNetworkStatus = "networkStatus" // build the network-status entry and the result
	phaseState         = "state"         // ADD: record the completed attachment; DEL: read it
	phaseKube          = "kube"          // write (or remove) the entry on the API server
)

// phases times the steps of one CNI call: the completed ADD keeps them in its state
// record (devplumbctl inspect shows them) and every ADD and DEL logs them at debug
// level (`make bench` reads them). Time spent before the call (process start, package
// initialisers) is not in them: it is the process's wall time less their sum.
type phases struct {
	last time.Time
	list []attachment.Phase
}

func startPhases() *phases { return &phases{last: time.Now()} }

// mark ends the step name: the time since the last mark is added to it.
func (p *phases) mark(name string) *phases {
	now := time.Now()
	d := now.Sub(p.last)
	p.last = now
	if i := slices.IndexFunc(p.list, func(ph attachment.Phase) bool { return ph.Name == name }); i >= 0 {
		p.list[i].Duration += d
		return p
	}
	p.list = append(p.list, attachment.Phase{Name: name, Duration: d})
	return p
}

// recorded is a copy of the steps so far, for the state record.
func (p *phases) recorded() []attachment.Phase { return slices.Clone(p.list) }

// log writes the steps as one debug line: msg=phases op=ADD config=85µs ...
func (p *phases) log(l *slog.Logger, op string) {
	if !l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := []any{"op", op}
	for _, ph := range p.list {
		attrs = append(attrs, ph.Name, ph.Duration)
	}
	l.Debug("phases", attrs...)
}

// endTiming ends the call's timing: the phases are logged and handed to
// Plugin.Phases (the node agent's histograms) or, without it, dropped in the
// spool when a node daemon keeps one. Losing a sample is no reason to fail a call.
func (c *call) endTiming(op string, err error) {
	c.timing.log(c.log, op)
	rec := phasespool.Record{Op: op, Network: c.conf.Name, Failed: err != nil, Phases: c.timing.recorded()}
	if c.plugin.Phases != nil {
		c.plugin.Phases(rec)
		return
	}
	if err := phasespool.Drop(c.conf.StateDir, rec); err != nil {
		c.log.Debug("phase record not spooled", "err", err)
	}
}
