package node_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/e2e/e2etest"
)

// calls are the agent's devplumb_call_duration_seconds of one op and network by path
// (agent: served by the agent; direct: run whole in devplumb-direct, drained from the spool).
type calls map[string]struct{ count, seconds float64 }

// callMetrics scrapes the agent's /metrics as Prometheus (metrics-rbac.yaml's service account).
func callMetrics(t *testing.T, op, network string) calls {
	t.Helper()
	var body string
	waitFor(t, "the agent's /metrics", func(context.Context) error {
		code, b := scrapeAgent(t)
		if code != http.StatusOK {
			return fmt.Errorf("%d %.200s", code, b)
		}
		body = b
		return nil
	})
	out := calls{}
	for _, l := range strings.Split(body, "\n") {
		for suffix, add := range map[string]func(*struct{ count, seconds float64 }, float64){
			"_count{": func(c *struct{ count, seconds float64 }, v float64) { c.count += v },
			"_sum{":   func(c *struct{ count, seconds float64 }, v float64) { c.seconds += v },
		} {
			rest, ok := strings.CutPrefix(l, "devplumb_call_duration_seconds"+suffix)
			if !ok || !strings.Contains(rest, `op="`+op+`"`) || !strings.Contains(rest, `network="`+network+`"`) {
				continue
			}
			labels, value, _ := strings.Cut(rest, "} ")
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", l, err)
			}
			path := label(labels, "path")
			c := out[path]
			add(&c, v)
			out[path] = c
		}
	}
	return out
}

var promToken string

func scrapeAgent(t *testing.T) (int, string) {
	t.Helper()
	if promToken == "" {
		promToken = saToken(t, "monitoring", "prometheus-k8s")
	}
	return e2etest.Scrape(t, devplumbMetrics, "/metrics", promToken)
}

// label is the value of name in a metric's label list.
func label(labels, name string) string {
	_, rest, ok := strings.Cut(labels, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// waitCalls waits until the agent counted at least n more calls of op on network by path
// than before (calls of devplumb-direct reach it when it drains the spool) and returns them.
func waitCalls(t *testing.T, before calls, op, network, path string, n float64) calls {
	t.Helper()
	var now calls
	waitFor(t, fmt.Sprintf("the agent counting %v %s calls of %s by path %s", n, op, network, path), func(context.Context) error {
		now = callMetrics(t, op, network)
		if got := now[path].count - before[path].count; got < n {
			return fmt.Errorf("%v more, by path: %+v", got, now)
		}
		return nil
	})
	return now
}

// logCalls shows the calls' count and mean time by path: what the fallback costs.
func logCalls(t *testing.T, what string, c calls) {
	t.Helper()
	for path, s := range c {
		if s.count > 0 {
			t.Logf("%s: %v calls by path %s, mean %.1f ms", what, s.count, path, 1000*s.seconds/s.count)
		}
	}
}
