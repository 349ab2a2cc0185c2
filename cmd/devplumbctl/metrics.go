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
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/phasemetrics"
)

const metricsUsage = `usage: devplumbctl metrics [--listen ADDR] [--state-dir DIR] [--drain-interval D] [--secure-metrics ...] [--log-level L] [--log-format F]
  serve devplumb's CNI call timings as Prometheus histograms on /metrics (and /healthz):
  while it runs, every ADD and DEL of devplumb with this state directory leaves a record
  of its phases, which this daemon turns into devplumb_phase_duration_seconds and
  devplumb_call_duration_seconds; run it on each node (the devplumb DaemonSet does)
`

// metrics serves until SIGINT or SIGTERM, then removes the spool so devplumb stops
// writing records, and exits 0.
func metrics(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), metricsUsage); fs.PrintDefaults() }
	m := registerMetricsFlags(fs, ":9111", "serve /metrics and /healthz on this address (host:port)")
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
	if err := serveMetrics(ctx, *m.listen, *m.stateDir, *m.every, m.secure, log); err != nil {
		log.Error("devplumbctl metrics failed", "err", err)
		return 1
	}
	return 0
}

// metricsFlags are the flags of a daemon serving the phase histograms
// (devplumbctl metrics, devplumbctl agent).
type metricsFlags struct {
	listen, stateDir *string
	every            *time.Duration
	secure           metricsauth.Options
}

func registerMetricsFlags(fs *flag.FlagSet, listen, listenHelp string) *metricsFlags {
	m := &metricsFlags{
		listen:   fs.String("listen", listen, listenHelp),
		stateDir: fs.String("state-dir", config.DefaultStateDir, "the devplumb state directory of the node's configs (its phase spool)"),
		every:    fs.Duration("drain-interval", 10*time.Second, "drain the spool this often between scrapes, so it stays small"),
	}
	m.secure.Register(fs)
	return m
}

func serveMetrics(ctx context.Context, addr, stateDir string, every time.Duration, secure metricsauth.Options, log *slog.Logger) error {
	c, err := openSpool(stateDir, every, log)
	if err != nil {
		return err
	}
	defer closeSpool(c, log)
	return servePhases(ctx, addr, c, every, secure, log)
}

func openSpool(stateDir string, every time.Duration, log *slog.Logger) (*phasemetrics.Collector, error) {
	if every <= 0 {
		return nil, fmt.Errorf("--drain-interval %v: must be positive", every)
	}
	return phasemetrics.NewCollector(stateDir, log)
}

// closeSpool removes the spool, so devplumb-direct stops writing records.
func closeSpool(c *phasemetrics.Collector, log *slog.Logger) {
	if err := c.Close(); err != nil {
		log.Error("remove phase spool", "err", err)
	}
}

// servePhases serves c's histograms and the extra collectors on /metrics
// (and /healthz) at addr, draining the spool every interval until ctx ends.
func servePhases(ctx context.Context, addr string, c *phasemetrics.Collector, every time.Duration, secure metricsauth.Options,
	log *slog.Logger, extra ...prometheus.Collector) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(append(extra, c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
	metricsHandler, tlsCfg, err := secure.Wrap(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
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
