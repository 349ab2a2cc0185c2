// Command devplumb-agent is devplumb's node agent (issue 24), a container of
// the devplumb DaemonSet: it serves the CNI entry point (cmd/devplumb) on a
// root-only unix socket, preparing each ADD and DEL (device, record,
// device-info) and committing it after the entry point ran the delegates
// (network-status, claim status, Event). It keeps what every devplumb-direct
// run builds anew: one Kubernetes client per kubeconfig, with watches of
// this node's pods and ResourceSlices (an ADD sends the API server writes
// only), and one PodResources connection per kubelet socket. It links no
// API server library: its metrics go out on a root-only unix socket that
// devplumbctl metrics serves on, secured, with its own.
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
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
	"github.com/devplumb/devplumb/pkg/cni/phasemetrics"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
	"github.com/devplumb/devplumb/podresources"
)

const usage = `usage: devplumb-agent [--socket PATH] [--node-name NAME] [--node-config FILE] [--kubeconfig FILE] [--timeout D]
         [--metrics-socket PATH] [--metrics-socket-gid GID --metrics-peer-uid UID] [--metrics-state-dir DIR]
         [--max-conns N] [--max-inflight BYTES] [--frame-wait D] [--log-level L] [--log-format F]
  serve devplumb's CNI entry point on a root-only unix socket (the node agent); run it on
  each node (the devplumb DaemonSet does); without it, calls run whole in devplumb-direct
`

// spoolDrainInterval keeps the phase spool small between scrapes.
const spoolDrainInterval = 10 * time.Second

// flags are devplumb-agent's settings.
type flags struct {
	socket, node, kubeconfig, metrics, nodeConfig *string
	timeout, frameWait                            *time.Duration
	maxConns                                      *int
	maxInflight                                   *int64
	// Who besides root may scrape the metrics socket, and whose phase spool
	// the agent serves: the DaemonSet's non-root metrics container's.
	metricsGID, metricsUID *int
	metricsStateDir        *string
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run serves until SIGINT or SIGTERM, then removes its sockets and exits 0.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devplumb-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	f := flags{
		socket: fs.String("socket", agentproto.DefaultSocket, "listen on this unix socket (its directory is made 0700)"),
		node:   fs.String("node-name", defaultNodeName(), "the node whose pods and ResourceSlices the agent watches ($NODE_NAME, else the host name)"),
		nodeConfig: fs.String("node-config", nodeconfig.Path(), "the node config every call follows, read again when it changes (the node's paths and kubeconfig; "+
			"$"+nodeconfig.Env+", else the default); an entry point naming another is left to devplumb-direct"),
		kubeconfig: fs.String("kubeconfig", "", "start this kubeconfig's client and watches at once, waiting for the file if it is "+
			"not there yet; empty: the node config's kubeconfig"),
		timeout: fs.Duration("timeout", podresources.DefaultTimeout, "bound of each request to the kubelet or the API server"),
		metrics: fs.String("metrics-socket", agentproto.DefaultMetricsSocket, "serve /metrics on this root-only unix socket; empty: none"),
		maxConns: fs.Int("max-conns", agentproto.DefaultMaxConns, "connections served at once; more are refused at once "+
			"(the entry point does those calls with devplumb-direct)"),
		maxInflight: fs.Int64("max-inflight", agentproto.DefaultMaxInflight, "bytes of requests all connections may hold "+
			"(at least twice the 4 MiB frame); a frame that cannot get its bytes within a second is refused"),
		frameWait: fs.Duration("frame-wait", agentproto.DefaultFrameWait, "bound on a request from its first byte to its last"),
		metricsGID: fs.Int("metrics-socket-gid", -1, "give the metrics socket to this group (mode 0660; a directory the agent "+
			"makes for it 0750); with --metrics-peer-uid; -1: root's only (0600)"),
		metricsUID: fs.Int("metrics-peer-uid", -1, "admit this peer uid on the metrics socket besides root (SO_PEERCRED); -1: root only"),
		metricsStateDir: fs.String("metrics-state-dir", "", "serve devplumb-direct's phase timings too, from the phase spool "+
			"the agent keeps below this devplumb state directory (path=\"direct\"); empty: none"),
	}
	showVersion := fs.Bool("version", false, "print the version and exit")
	logFlags := logging.Register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.Get())
		return 0
	}
	log, err := logFlags.New(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "devplumb-agent: %v\n", err)
		return 2
	}
	if err := f.check(); err != nil {
		fmt.Fprintf(stderr, "devplumb-agent: %v\n", err)
		return 2
	}
	if err := (metricsAccess{gid: *f.metricsGID, uid: *f.metricsUID}).check(); err != nil {
		fmt.Fprintf(stderr, "devplumb-agent: %v\n", err)
		return 2
	}
	// Before the socket exists: a signal from then on ends the agent cleanly.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := serve(ctx, f, log); err != nil {
		log.Error("devplumb-agent failed", "err", err)
		return 1
	}
	return 0
}

// check refuses settings the agent cannot serve with.
func (f flags) check() error {
	switch {
	case *f.timeout <= 0:
		return fmt.Errorf("--timeout %v: must be positive", *f.timeout)
	case *f.frameWait <= 0:
		return fmt.Errorf("--frame-wait %v: must be positive", *f.frameWait)
	case *f.maxConns <= 0:
		return fmt.Errorf("--max-conns %d: must be positive", *f.maxConns)
	case *f.maxInflight < 2*agentproto.MaxFrame:
		return fmt.Errorf("--max-inflight %d: must be at least %d (two frames of the maximum)", *f.maxInflight, 2*agentproto.MaxFrame)
	}
	return nil
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

func serve(ctx context.Context, f flags, log *slog.Logger) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	cacheMetrics := nodecache.NewMetrics()
	spoolDir := *f.metricsStateDir
	if *f.metrics == "" {
		spoolDir = "" // no one would see the spool's series
	}
	phases, err := phaseHistograms(ctx, spoolDir, spoolDrainInterval, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := phases.Close(); err != nil {
			log.Error("remove phase spool", "err", err)
		}
	}()
	a := agent.New(agent.Config{Build: version.Get().String(), Log: log, Timeout: *f.timeout,
		NodeConfig: *f.nodeConfig, NewKube: agent.NodeKube(*f.node, cacheMetrics),
		Phases: func(r phasespool.Record) {
			if err := phases.Observe(r, phasemetrics.PathAgent); err != nil {
				log.Warn("phase timings not observed", "err", err)
			}
		}})
	defer a.Close()
	l, err := agentproto.Listen(*f.socket)
	if err != nil {
		return err
	}
	metricsDone := func() error { return nil }
	if *f.metrics != "" {
		acc := metricsAccess{gid: *f.metricsGID, uid: *f.metricsUID}
		if metricsDone, err = serveMetrics(ctx, stop, *f.metrics, acc, log, append(a.Collectors(), cacheMetrics, phases)...); err != nil {
			return err
		}
	}
	if kc := warmKubeconfig(f, log); kc != "" {
		go warm(ctx, a, kc, log)
	}
	log.Info("devplumb agent serving", "socket", *f.socket, "node", *f.node, "build", a.Build())
	// Serve closes l when ctx ends, which removes the socket file.
	srv := &agentproto.Server{Handler: a, Log: log, MaxConns: *f.maxConns, MaxInflight: *f.maxInflight, FrameWait: *f.frameWait}
	err = srv.Serve(ctx, l)
	stop()
	return errors.Join(err, metricsDone())
}

// warmKubeconfig is the kubeconfig whose client starts at once: --kubeconfig,
// else the node config's (none: no client until a call needs one).
func warmKubeconfig(f flags, log *slog.Logger) string {
	if *f.kubeconfig != "" {
		return *f.kubeconfig
	}
	n, err := nodeconfig.Load(*f.nodeConfig)
	if err != nil {
		log.Warn("node config not usable yet: the Kubernetes client starts at the first call", "err", err)
		return ""
	}
	return n.Kubeconfig
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
