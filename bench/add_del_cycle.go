package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// variant is one way of running the bridge delegate for P1.
type variant struct {
	label string
	net   string // cnitool network name
	pod   string
	netns string
	ms    []float64 // ADD+DEL cycles
}

// p1 runs ADD+DEL cycles of every variant in turn (rotating the order each round, so
// drifting load spreads evenly) through cnitool into one netns per variant.
func p1(cfg Config, r *Report) error {
	e, err := newEnv(cfg, podresourcesserver.Config{NoRateLimit: true})
	if err != nil {
		return err
	}
	defer e.close()
	vs, err := p1Variants(e)
	if err != nil {
		return err
	}
	if err := e.pods.set(len(vs), 1); err != nil {
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
	const warmup = 2
	for round := range warmup + cfg.Runs {
		for i := range vs {
			v := vs[(i+round)%len(vs)]
			d, err := cycle(e, v)
			if err != nil {
				return fmt.Errorf("%s: %w", v.label, err)
			}
			if round >= warmup {
				v.ms = append(v.ms, Ms(d))
			}
		}
	}
	r.Tables = append(r.Tables, p1Table(vs, cfg))
	p := Panel{Title: "P1: one ADD+DEL cycle through cnitool", Unit: "ms"}
	for _, v := range vs {
		p.Bars = append(p.Bars, Bar{Label: v.label, S: Summarize(v.ms)})
	}
	r.Panels = append(r.Panels, p)
	return nil
}

func cycle(e *env, v *variant) (time.Duration, error) {
	add, err := e.cnitool("add", v.net, v.netns, "net1", v.pod)
	if err != nil {
		return 0, err
	}
	del, err := e.cnitool("del", v.net, v.netns, "net1", v.pod)
	return add + del, err
}

// p1Variants writes the networks: the delegate alone (the floor), devplumb with its
// state on disk and on tmpfs, the baseline build, and Multus thin.
func p1Variants(e *env) ([]*variant, error) {
	floor := e.bridge("10.123.0.0/24")
	floor["cniVersion"], floor["name"] = "1.0.0", "floor"
	multusDelegate := e.bridge("10.123.4.0/24")
	multusDelegate["cniVersion"], multusDelegate["name"] = "1.0.0", "multus-bridge"
	nets := []struct {
		label string
		conf  map[string]any
		skip  bool
		kube  bool // with a kubeconfig: network-status written to the API server
	}{
		{"bridge + host-local alone (floor)", floor, false, false},
		{"devplumb -> bridge (state on disk)", e.devplumbConf("dp", "10.123.1.0/24", filepath.Join(e.dir, "state")), false, false},
		{"devplumb -> bridge (state on tmpfs)", e.devplumbConf("dpshm", "10.123.2.0/24", filepath.Join(e.shm, "state")), false, false},
		{"devplumb -> bridge + network-status (API)", e.devplumbConf("dpkube", "10.123.5.0/24", filepath.Join(e.dir, "state")), e.cfg.kube == nil, true},
		{"devplumb baseline -> bridge (disk)", baselineConf(e), e.cfg.Baseline == "", false},
		{"Multus thin -> bridge", map[string]any{"cniVersion": "1.0.0", "name": "multus", "type": "multus",
			"binDir": e.bin, "cniDir": filepath.Join(e.dir, "multus"), "logLevel": "error",
			"delegates": []any{multusDelegate}}, e.cfg.Multus == "", false},
		{thickLabel, thickShimConf(e), thickSkipReason(e.cfg) != nil, false},
	}
	var vs []*variant
	for _, n := range nets {
		if n.skip {
			continue
		}
		if n.kube {
			if _, err := e.withKube(n.conf, podName(len(vs))); err != nil {
				return nil, err
			}
		}
		if err := e.writeNet(n.conf); err != nil {
			return nil, err
		}
		vs = append(vs, &variant{label: n.label, net: n.conf["name"].(string), pod: podName(len(vs))})
	}
	return vs, nil
}

// baselineConf is devplumb's network run by the baseline binary, linked as another type.
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
	t.Notes = append(t.Notes, "Targets: devplumb's cycle at most 1.3 × the floor, its added time at most half of Multus thin's.",
		"devplumb asks the PodResources server for the pod's device on every ADD; without a kubeconfig, as Multus thin here, unless the row says API: then it writes and removes its network-status entry on a real kube-apiserver (make bench runs one).")
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
	for _, v := range vs {
		if v.net == net {
			return Summarize(v.ms).Median - floor
		}
	}
	return -1
}

// ratio is added ÷ of as a table cell: "–" for the floor and when of was not measured.
func ratio(added, of float64, isFloor bool) string {
	if of <= 0 || isFloor {
		return "–"
	}
	return fmt.Sprintf("%.2f", added/of)
}
