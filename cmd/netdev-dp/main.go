// Command netdev-dp is the reference device plugin for network devices:
// PCI PFs/VFs, named netdevs, vDPA devices, vhost-user and memif sockets.
// It advertises them to the kubelet, writes their CDI specs and device-info
// files, and removes all of it on SIGTERM or SIGINT. With --mode dra it is
// a DRA driver for the same config instead (pkg/netdevdra): ResourceSlices,
// and CDI specs and device-info files of prepared claims, which stay
// prepared across its restarts.
//
//	netdev-dp --config FILE [--plugin-dir DIR] [--devinfo-dir DIR] [--cdi-dir DIR] [--sysfs-root DIR]
//	          [--log-level LEVEL] [--log-format text|json]
//	netdev-dp --mode dra --config FILE [--node-name NODE] [--kubeconfig FILE] [--driver-name NAME]
//	          [--kubelet-registrar-dir DIR] [--kubelet-plugins-dir DIR] [--devinfo-dir DIR] [--cdi-dir DIR] ...
//	netdev-dp --version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/devplumb/devplumb/pkg/dpmetrics"
	"github.com/devplumb/devplumb/pkg/logging"
	"github.com/devplumb/devplumb/pkg/netdevdp"
	"github.com/devplumb/devplumb/pkg/netdevdra"
	"github.com/devplumb/devplumb/pkg/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("netdev-dp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (JSON); required")
	pluginDir := fs.String("plugin-dir", "", "kubelet device plugin dir (default /var/lib/kubelet/device-plugins/)")
	devinfoDir := fs.String("devinfo-dir", "", "device-info dir holding dp/ (default /var/run/k8s.cni.cncf.io/devinfo)")
	cdiDir := fs.String("cdi-dir", "", "CDI spec dir (default /var/run/cdi)")
	sysfsRoot := fs.String("sysfs-root", "", "sysfs mount (default /sys)")
	logFlags := logging.Register(fs)
	debug := fs.Bool("debug", false, "same as --log-level debug (kept for old command lines)")
	metricsAddr := fs.String("metrics-address", "", "serve /metrics, /healthz and /readyz on this address (host:port); empty: off")
	showVersion := fs.Bool("version", false, "print the version and exit")
	mode := fs.String("mode", "deviceplugin", "deviceplugin or dra")
	var dra netdevdra.Options
	fs.StringVar(&dra.DriverName, "driver-name", netdevdra.DefaultDriverName, "dra mode: the DRA driver name (and its attributes' domain)")
	fs.StringVar(&dra.NodeName, "node-name", os.Getenv("NODE_NAME"), "dra mode: this node's name (default $NODE_NAME)")
	fs.StringVar(&dra.RegistrarDir, "kubelet-registrar-dir", kubeletplugin.KubeletRegistryDir, "dra mode: the kubelet's plugin registration dir")
	fs.StringVar(&dra.PluginsDir, "kubelet-plugins-dir", kubeletplugin.KubeletPluginsDir, "dra mode: the kubelet's plugins dir (socket in <dir>/<driver>/dra.sock)")
	kubeconfig := fs.String("kubeconfig", "", "dra mode: kubeconfig file (default: the pod's service account)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for, and printed: not an error
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.Line("netdev-dp"))
		return 0
	}
	if *debug {
		logFlags.Level = "debug"
	}
	log, err := logFlags.New(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "netdev-dp: %v\n", err)
		return 2
	}
	if *mode != "deviceplugin" && *mode != "dra" {
		fmt.Fprintf(stderr, "netdev-dp: --mode %q: want deviceplugin or dra\n", *mode)
		return 2
	}
	if *configPath == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "netdev-dp: --config FILE is required and no other arguments are taken")
		fs.Usage()
		return 2
	}
	cfg, err := netdevdp.LoadConfig(*configPath)
	if err != nil {
		log.Error("netdev-dp: bad config", "err", err)
		return 1
	}
	override(&cfg.PluginDir, *pluginDir)
	override(&cfg.DevInfoDir, *devinfoDir)
	override(&cfg.CDIDir, *cdiDir)
	override(&cfg.SysfsRoot, *sysfsRoot)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *mode == "dra" && *metricsAddr != "" {
		fmt.Fprintln(stderr, "netdev-dp: --metrics-address serves the device plugins' metrics and is not taken with --mode dra")
		return 2
	}
	if *metricsAddr != "" {
		cfg.Metrics = dpmetrics.New("netdev_dp")
		stopMetrics, err := serveMetrics(*metricsAddr, cfg.Metrics.Handler(), log)
		if err != nil {
			log.Error("netdev-dp: metrics", "err", err)
			return 1
		}
		defer stopMetrics()
	}
	if *mode == "dra" {
		return runDRA(ctx, cfg, dra, *kubeconfig, log)
	}
	if err := netdevdp.Run(ctx, cfg, log); err != nil {
		log.Error("netdev-dp failed", "err", err)
		return 1
	}
	log.Info("netdev-dp stopped")
	return 0
}

// runDRA serves cfg as a DRA driver until ctx ends.
func runDRA(ctx context.Context, cfg *netdevdp.Config, o netdevdra.Options, kubeconfig string, log *slog.Logger) int {
	client, err := netdevdra.NewClient(kubeconfig)
	if err == nil {
		o.Client = client
		var d *netdevdra.Driver
		if d, err = netdevdra.New(cfg, o, log); err == nil {
			err = d.Run(ctx)
		}
	}
	if err != nil {
		log.Error("netdev-dp (DRA mode) failed", "err", err)
		return 1
	}
	log.Info("netdev-dp stopped; prepared claims stay prepared")
	return 0
}

// serveMetrics listens at once, so a taken port fails the start rather than
// a probe later, and serves until the returned stop is called.
func serveMetrics(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-address %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving metrics and probes", "address", l.Addr().String())
	return func() { _ = srv.Close() }, nil
}

func override(field *string, flagValue string) {
	if flagValue != "" {
		*field = flagValue
	}
}
