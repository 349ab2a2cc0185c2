package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/pkg/base/logging"
	"github.com/devplumb/devplumb/pkg/base/version"
	"github.com/devplumb/devplumb/pkg/cni/agent"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/nodecache"
	"github.com/devplumb/devplumb/pkg/cni/phasemetrics"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
	"github.com/devplumb/devplumb/podresources"
	"github.com/prometheus/client_golang/prometheus"
)

const agentUsage = `usage: devplumbctl agent [--socket PATH] [--node-name NAME] [--kubeconfig FILE] [--timeout D] [--listen ADDR
         [--state-dir DIR] [--drain-interval D] [--secure-metrics ...]] [--log-level L] [--log-format F]
  serve devplumb's CNI entry point on a root-only unix socket (the node agent): it
  prepares each ADD and DEL (device, record, device-info) and commits it after the
  entry point ran the delegates (network-status, claim status, Event), keeping one
  Kubernetes client per kubeconfig, with watches of this node's pods and ResourceSlices
  (an ADD sends the API server writes only), and one PodResources connection per kubelet
  socket. With --listen it serves the calls' phase histograms on /metrics, as
  devplumbctl metrics does (also of calls that ran whole in devplumb-direct). Run it on
  each node (the devplumb DaemonSet does); without it, calls run whole in devplumb-direct
`

// agentFlags are devplumbctl agent's settings.
type agentFlags struct {
	socket, node, kubeconfig *string
	timeout                  *time.Duration
	metrics                  *metricsFlags
}

// agentCmd serves until SIGINT or SIGTERM, then removes its socket and exits 0.
func agentCmd(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), agentUsage); fs.PrintDefaults() }
	f := agentFlags{
		socket: fs.String("socket", agentproto.DefaultSocket, "listen on this unix socket (its directory is made 0700)"),
		node:   fs.String("node-name", defaultNodeName(), "the node whose pods and ResourceSlices the agent watches ($NODE_NAME, else the host name)"),
		kubeconfig: fs.String("kubeconfig", "", "start this kubeconfig's client and watches at once (the one the node's configs name), "+
			"waiting for the file if it is not there yet; without it they start at the first call naming it"),
		timeout: fs.Duration("timeout", podresources.DefaultTimeout, "bound of each request to the kubelet or the API server"),
		metrics: registerMetricsFlags(fs, "", "serve /metrics and /healthz on this address (host:port); empty: none"),
	}
	logFlags := logging.Register(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	log, err := logFlags.New(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "devplumbctl agent: %v\n", err)
		return 2
	}
	if *f.timeout <= 0 {
		fmt.Fprintf(stderr, "devplumbctl agent: --timeout %v: must be positive\n", *f.timeout)
		return 2
	}
	// Before the socket exists: a signal from then on ends the agent cleanly.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := serveAgent(ctx, f, log); err != nil {
		log.Error("devplumbctl agent failed", "err", err)
		return 1
	}
	return 0
}

// defaultNodeName is the DaemonSet's NODE_NAME (the downward API's
// spec.nodeName), else the kubelet's default node name: the host name.
func defaultNodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname()
	return strings.ToLower(strings.TrimSpace(h))
}

func serveAgent(ctx context.Context, f agentFlags, log *slog.Logger) error {
	cacheMetrics := nodecache.NewMetrics()
	cfg := agent.Config{Build: version.Get().String(), Log: log, Timeout: *f.timeout, NewKube: agent.NodeKube(*f.node, cacheMetrics)}
	var spool *phasemetrics.Collector
	if *f.metrics.listen != "" {
		var err error
		if spool, err = openSpool(*f.metrics.stateDir, *f.metrics.every, log); err != nil {
			return err
		}
		defer closeSpool(spool, log)
		cfg.Phases = func(r phasespool.Record) {
			if err := spool.Observe(r, phasemetrics.PathAgent); err != nil {
				log.Warn("phase timings not observed", "err", err)
			}
		}
	}
	l, err := agentproto.Listen(*f.socket)
	if err != nil {
		return err
	}
	// Serve closes l when ctx ends, which removes the socket file.
	a := agent.New(cfg)
	defer a.Close()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	metricsDone := func() error { return nil }
	if spool != nil {
		metricsDone = startAgentMetrics(ctx, stop, f.metrics, spool, log, append(a.Collectors(), cacheMetrics)...)
	}
	if *f.kubeconfig != "" {
		go warm(ctx, a, *f.kubeconfig, log)
	}
	log.Info("devplumb agent serving", "socket", *f.socket, "node", *f.node, "build", a.Build())
	err = (&agentproto.Server{Handler: a, Log: log}).Serve(ctx, l)
	stop()
	return errors.Join(err, metricsDone())
}

// startAgentMetrics serves the agent's /metrics until ctx ends; one that
// cannot serve ends the agent (stop), as it ends devplumbctl metrics. The
// function returned waits for the server and says why it stopped.
func startAgentMetrics(ctx context.Context, stop func(), m *metricsFlags, spool *phasemetrics.Collector,
	log *slog.Logger, extra ...prometheus.Collector) func() error {
	done := make(chan error, 1)
	go func() {
		done <- servePhases(ctx, *m.listen, spool, *m.every, m.secure, log, extra...)
		stop()
	}()
	return func() error { return <-done }
}

// warm starts the kubeconfig's client and watches, retrying until the file
// is there and loads (the install container writes it) or ctx ends.
func warm(ctx context.Context, a *agent.Agent, kubeconfig string, log *slog.Logger) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		err := a.Warm(kubeconfig)
		if err == nil {
			log.Info("Kubernetes client and watches started", "kubeconfig", kubeconfig)
			return
		}
		log.Debug("kubeconfig not usable yet", "kubeconfig", kubeconfig, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
