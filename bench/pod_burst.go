package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// p3 adds cfg.Pods pods at once, each with two devplumb attachments (two networks
// sharing one stateDir) that must get the pod's two devices, one each, against the
// kubelet's PodResources rate limit (100 QPS, burst 10); then deletes them all at once.
func p3(cfg Config, r *Report) error {
	var calls atomic.Int64
	e, err := newEnvWithPods(cfg, podresourcesserver.Config{QPS: 100, Burst: 10, OnCall: func(string) { calls.Add(1) }}, cfg.Pods, 2)
	if err != nil {
		return err
	}
	defer e.close()
	state := filepath.Join(e.dir, "state")
	nets := []string{"burst-a", "burst-b"}
	for i, n := range nets {
		if err := e.writeNet(e.devplumbConf(n, fmt.Sprintf("10.124.%d.0/22", 4*i), state)); err != nil {
			return err
		}
	}
	netns := make([]string, cfg.Pods)
	for i := range netns {
		if netns[i], err = e.newNetns(); err != nil {
			return err
		}
	}
	add := burst(e, "add", nets, netns)
	addCalls := calls.Load()
	double, wrong, err := checkClaims(state)
	if err != nil {
		return err
	}
	del := burst(e, "del", nets, netns)
	left, _ := filepath.Glob(filepath.Join(state, "attachments", "*.json"))
	total := cfg.Pods * len(nets)
	r.Tables = append(r.Tables, Table{Title: fmt.Sprintf("P3: %d pods × 2 attachments added at once, PodResources limited to 100 QPS, burst 10", cfg.Pods),
		Header: []string{"ADDs", "failed ADDs", "devices claimed twice", "devices not the pod's", "all ADDs done in", "PodResources calls (refused ones included)", "failed DELs", "all DELs done in", "records left"},
		Rows: [][]string{{fmt.Sprint(total), fmt.Sprint(add.failed), fmt.Sprint(double), fmt.Sprint(wrong), add.took.Round(time.Millisecond).String(),
			fmt.Sprint(addCalls), fmt.Sprint(del.failed), del.took.Round(time.Millisecond).String(), fmt.Sprint(len(left))}},
		Notes: []string{"Target: 0 failures, 0 double claims. Every ADD runs cnitool -> devplumb -> bridge + host-local in its pod's own netns."}})
	return nil
}

// burstResult is what a burst of calls did: how many failed, the time until the last one
// ended, and how each went through the entry point (fallbackPath; only meaningful when the
// calls were given an agent).
type burstResult struct {
	failed int
	took   time.Duration
	paths  map[string]int
}

// burst runs cmd for every pod and network at once.
func burst(e *env, cmd string, nets, netns []string, extraEnv ...string) burstResult {
	var wg sync.WaitGroup
	var mu sync.Mutex
	r := burstResult{paths: map[string]int{}}
	start := time.Now()
	for i, ns := range netns {
		for j, n := range nets {
			wg.Go(func() {
				_, out, err := e.cnitoolOutput(cmd, n, ns, fmt.Sprintf("net%d", j+1), podName(i), extraEnv...)
				mu.Lock()
				defer mu.Unlock()
				r.paths[fallbackPath(out)]++
				if err != nil {
					r.failed++
					e.cfg.logf("   %s pod %d %s: %v", cmd, i, n, err)
				}
			})
		}
	}
	wg.Wait()
	r.took = time.Since(start)
	return r
}

// checkClaims reads devplumb's records: devices held by two attachments, and devices
// held for a pod the kubelet did not give them to (dev-<pod>-<n> belongs to pod-<pod>).
func checkClaims(state string) (double, wrong int, err error) {
	files, err := filepath.Glob(filepath.Join(state, "attachments", "*.json"))
	if err != nil {
		return 0, 0, err
	}
	held := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, 0, err
		}
		var rec struct {
			DeviceID string `json:"deviceID"`
			Pod      struct {
				Name string `json:"name"`
			} `json:"pod"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", f, err)
		}
		held[rec.DeviceID]++
		var pod, n int
		if _, err := fmt.Sscanf(rec.DeviceID, "dev-%d-%d", &pod, &n); err != nil || podName(pod) != rec.Pod.Name {
			wrong++
		}
	}
	for _, c := range held {
		if c > 1 {
			double += c - 1
		}
	}
	return double, wrong, nil
}
