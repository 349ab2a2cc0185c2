package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/devplumb/devplumb/pkg/base/logging"
	"github.com/devplumb/devplumb/pkg/base/metricsauth"
	"github.com/devplumb/devplumb/pkg/base/metricsserver"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/phasemetrics"
)

const metricsUsage = `usage: devplumbctl metrics [--listen ADDR] [--state-dir DIR] [--drain-interval D] [--agent-metrics PATH]
         [--secure-metrics ...] [--log-level L] [--log-format F]
  serve devplumb's CNI call timings as Prometheus histograms on /metrics (and /healthz):
  while it runs, every ADD and DEL of devplumb-direct with this state directory leaves a
  record of its phases, which this daemon turns into devplumb_phase_duration_seconds and
  devplumb_call_duration_seconds{path="direct"}; the node agent's metrics (its calls,
  path="agent", its requests and watches) are served beside them; run it on each node
  (the devplumb DaemonSet does, with --state-dir "": the agent keeps the spool and serves
  its series, so this daemon runs as non-root with no access to devplumb's state)
`

// metrics serves until SIGINT or SIGTERM, then removes the spool so devplumb stops
// writing records, and exits 0.
func metrics(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), metricsUsage); fs.PrintDefaults() }
	listen := fs.String("listen", ":9111", "serve /metrics and /healthz on this address (host:port)")
	stateDir := fs.String("state-dir", config.DefaultStateDir, "the devplumb state directory of the node's configs, whose "+
		"phase spool this daemon keeps; empty: none (the node agent keeps it: devplumb-agent --metrics-state-dir)")
	every := fs.Duration("drain-interval", 10*time.Second, "drain the spool this often between scrapes, so it stays small")
	agentMetrics := fs.String("agent-metrics", agentproto.DefaultMetricsSocket,
		"serve the node agent's metrics from its unix socket beside these (none while it does not answer); empty: not")
	var secure metricsauth.Options
	secure.Register(fs)
	logFlags := logging.Register(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	log, err := logFlags.New(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "devplumbctl metrics: %v\n", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := serveMetrics(ctx, *listen, *stateDir, *every, *agentMetrics, secure, log); err != nil {
		log.Error("devplumbctl metrics failed", "err", err)
		return 1
	}
	return 0
}

func serveMetrics(ctx context.Context, addr, stateDir string, every time.Duration, agentSocket string,
	secure metricsauth.Options, log *slog.Logger) error {
	if every <= 0 {
		return fmt.Errorf("--drain-interval %v: must be positive", every)
	}
	c, err := spoolCollector(stateDir, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := c.Close(); err != nil {
			log.Error("remove phase spool", "err", err)
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if stateDir != "" {
		reg.MustRegister(c)
	}
	gatherers := prometheus.Gatherers{reg}
	if agentSocket != "" {
		gatherers = append(gatherers, agentGatherer(agentSocket, log))
	}
	// An agent whose series clash with these costs its series, not the scrape.
	opts := promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}
	metricsHandler, tlsCfg, err := secure.Wrap(promhttp.HandlerFor(gatherers, opts))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	stop, err := metricsserver.StartTLS("--listen", addr, mux, tlsCfg, log)
	if err != nil {
		return err
	}
	defer stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := c.Drain(); err != nil {
				log.Warn("drain phase spool", "err", err)
			}
		}
	}
}

// spoolCollector keeps the phase spool below stateDir; without one (the
// DaemonSet's metrics container, which runs as non-root and has no access to
// devplumb's state: the node agent serves the spool's series) it is
// histograms no one registers, whose Drain and Close do nothing.
func spoolCollector(stateDir string, log *slog.Logger) (*phasemetrics.Collector, error) {
	if stateDir == "" {
		return phasemetrics.NewHistograms(log), nil
	}
	return phasemetrics.NewCollector(stateDir, log)
}
