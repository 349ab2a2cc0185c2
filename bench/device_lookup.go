package bench

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
	"github.com/devplumb/devplumb/podresources"
)

// p2 times devplumb's device lookup (the podresources library, in process) on nodes of
// 10, 110 and 1,000 pods: Get on an open connection, a new connection and Get (what one
// devplumb ADD does), and List (the fallback when the kubelet's Get is off).
func p2(cfg Config, r *Report) error {
	t := Table{Title: "P2: device lookup against the number of pods on the node",
		Header: []string{"pods", "Get", "dial + Get", "List (Get off)", "Get 1000 ÷ Get 10"}}
	var get10 float64
	for _, n := range []int{10, 110, 1000} {
		get, dialGet, list, err := lookups(cfg, n)
		if err != nil {
			return fmt.Errorf("%d pods: %w", n, err)
		}
		ratio := ""
		if n == 10 {
			get10 = get.Median
		} else if n == 1000 {
			ratio = fmt.Sprintf("%.2f", get.Median/get10)
		}
		t.Rows = append(t.Rows, []string{fmt.Sprint(n), get.Format("ms"), dialGet.Format("ms"), list.Format("ms"), ratio})
	}
	t.Notes = []string{"Target: Get on 1,000 pods at most 1.5 × Get on 10, both under 2 ms.",
		"Each pod holds 2 devices; the pod looked up is the middle one. The server is the project's kubelet PodResources v1 server (pkg/kubeletsim/podresourcesserver) without its rate limiter."}
	r.Tables = append(r.Tables, t)
	return nil
}

func lookups(cfg Config, pods int) (get, dialGet, list Summary, err error) {
	samples := max(cfg.Runs*10, 100)
	for _, mode := range []podresourcesserver.GetMode{podresourcesserver.GetEnabled, podresourcesserver.GetDisabled} {
		e, err := newEnvWithPods(cfg, podresourcesserver.Config{NoRateLimit: true, GetMode: mode}, pods, 2)
		if err != nil {
			return get, dialGet, list, err
		}
		target := podName(pods / 2)
		if mode == podresourcesserver.GetEnabled {
			get, err = timeLookups(e, target, samples, false)
			if err == nil {
				dialGet, err = timeLookups(e, target, samples, true)
			}
		} else {
			list, err = timeLookups(e, target, samples, false)
		}
		e.close()
		if err != nil {
			return get, dialGet, list, err
		}
	}
	return get, dialGet, list, nil
}

// timeLookups looks target's devices up samples times, on one connection or (dial) on a
// new one each time.
func timeLookups(e *env, target string, samples int, dial bool) (Summary, error) {
	ctx := context.Background()
	open := func() (*podresources.Client, error) {
		return podresources.New(e.pr.Socket(), podresources.WithLogger(slog.New(slog.DiscardHandler)))
	}
	c, err := open()
	if err != nil {
		return Summary{}, err
	}
	defer func() { c.Close() }()
	var ms []float64
	for i := range samples + 5 {
		start := time.Now()
		if dial {
			c.Close()
			if c, err = open(); err != nil {
				return Summary{}, err
			}
		}
		ids, err := c.Devices(ctx, podNS, target, Resource)
		d := time.Since(start)
		if err != nil || len(ids) != 2 {
			return Summary{}, fmt.Errorf("devices of %s: %v, %w", target, ids, err)
		}
		if i >= 5 { // the first calls warm the connection up
			ms = append(ms, Ms(d))
		}
	}
	return Summarize(ms), nil
}
