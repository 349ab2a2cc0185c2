package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/devplumb/devplumb/pkg/base/logging"
	"github.com/devplumb/devplumb/pkg/base/version"
	"github.com/devplumb/devplumb/pkg/cni/agent"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
	"github.com/devplumb/devplumb/podresources"
)

const agentUsage = `usage: devplumbctl agent [--socket PATH] [--timeout D] [--log-level L] [--log-format F]
  serve devplumb's CNI entry point on a root-only unix socket (the node agent): it
  prepares each ADD and DEL (device, record, device-info) and commits it after the
  entry point ran the delegates (network-status, claim status, Event), keeping one
  Kubernetes client per kubeconfig and one PodResources connection per kubelet socket;
  run it on each node (the devplumb DaemonSet does); without it, calls run whole in
  devplumb-direct
`

// agentCmd serves until SIGINT or SIGTERM, then removes its socket and exits 0.
func agentCmd(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), agentUsage); fs.PrintDefaults() }
	socket := fs.String("socket", agentproto.DefaultSocket, "listen on this unix socket (its directory is made 0700)")
	timeout := fs.Duration("timeout", podresources.DefaultTimeout, "bound of each request to the kubelet or the API server")
	logFlags := logging.Register(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	log, err := logFlags.New(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "devplumbctl agent: %v\n", err)
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintf(stderr, "devplumbctl agent: --timeout %v: must be positive\n", *timeout)
		return 2
	}
	// Before the socket exists: a signal from then on ends the agent cleanly.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := serveAgent(ctx, *socket, *timeout, log); err != nil {
		log.Error("devplumbctl agent failed", "err", err)
		return 1
	}
	return 0
}

func serveAgent(ctx context.Context, socket string, timeout time.Duration, log *slog.Logger) error {
	l, err := agentproto.Listen(socket)
	if err != nil {
		return err
	}
	// Serve closes l when ctx ends, which removes the socket file.
	a := agent.New(agent.Config{Build: version.Get().String(), Log: log, Timeout: timeout, NewKube: newKube})
	defer a.Close()
	log.Info("devplumb agent serving", "socket", socket, "build", a.Build())
	return (&agentproto.Server{Handler: a, Log: log}).Serve(ctx, l)
}

func newKube(kubeconfig string, timeout time.Duration, log *slog.Logger) (plugin.Kube, error) {
	c, err := kube.New(kubeconfig, timeout, log)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return c, nil
}
