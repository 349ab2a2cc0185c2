// Command netdev-dp is the reference device plugin for network devices:
// PCI PFs/VFs, named netdevs, vDPA devices, vhost-user and memif sockets.
// It advertises them to the kubelet and writes their CDI specs and device-info
// files; on SIGTERM or SIGINT it removes those of the devices no pod holds (it
// asks the kubelet's PodResources API, and keeps all when it cannot), and the
// next instance adopts the rest. With --mode dra it is
// a DRA driver for the same config instead (pkg/netdev/dramode): ResourceSlices,
// and CDI specs and device-info files of prepared claims, which stay
// prepared across its restarts.
//
//	netdev-dp [--mode deviceplugin] --config FILE [--resource-prefix PREFIX] [--plugin-dir DIR] [--devinfo-dir DIR] [--cdi-dir DIR] [--sysfs-root DIR]
//	          [--pod-resources-socket SOCKET]
//	          [--metrics-address HOST:PORT] [--health-grace DURATION] [--log-level LEVEL] [--log-format text|json] [--debug]
//	netdev-dp --mode dra --config FILE [--node-name NODE] [--kubeconfig FILE] [--driver-name NAME]
//	          [--kubelet-registrar-dir DIR] [--kubelet-plugins-dir DIR] [--device-metadata=false]
//	          [--devinfo-dir DIR] [--cdi-dir DIR] [--metrics-address HOST:PORT] ...
//	netdev-dp --version
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
	"syscall"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"sigs.k8s.io/yaml"

	"github.com/devplumb/devplumb/pkg/base/logging"
	"github.com/devplumb/devplumb/pkg/base/metricsauth"
	"github.com/devplumb/devplumb/pkg/base/metricsserver"
	"github.com/devplumb/devplumb/pkg/base/version"
	"github.com/devplumb/devplumb/pkg/netdev/dpmode"
	"github.com/devplumb/devplumb/pkg/netdev/dramode"
	"github.com/devplumb/devplumb/pkg/netdev/metrics"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/sriovdp"
	"github.com/devplumb/devplumb/podresources"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are netdev-dp's command line.
type options struct {
	configPath, pluginDir, devinfoDir, cdiDir, sysfsRoot string
	resourcePrefix                                       string
	resourcePrefixSet, printClasses                      bool
	podResourcesSocket                                   string
	metricsAddr, mode, kubeconfig                        string
	healthGrace                                          time.Duration
	secure                                               metricsauth.Options
	dra                                                  dramode.Options
	log                                                  *slog.Logger
}

func run(args []string, stdout, stderr io.Writer) int {
	o, code := parse(args, stdout, stderr)
	if o == nil {
		return code
	}
	cfg, err := loadConfig(o)
	if err != nil {
		o.log.Error("netdev-dp: bad config", "err", err)
		return 1
	}
	if o.printClasses {
		return printDeviceClasses(cfg, o.dra.DriverName, stdout, o.log)
	}
	override(&cfg.PluginDir, o.pluginDir)
	override(&cfg.DevInfoDir, o.devinfoDir)
	override(&cfg.CDIDir, o.cdiDir)
	override(&cfg.SysfsRoot, o.sysfsRoot)
	override(&cfg.PodResourcesSocket, o.podResourcesSocket)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var m *metrics.Metrics // nil: no metrics
	if o.metricsAddr != "" {
		m = metrics.New("netdev_dp")
		m.SetGrace(o.healthGrace)
		if o.mode == "dra" {
			o.dra.Observer = m.DRA(o.dra.DriverName, dramode.RegistrationSocket(o.dra))
		}
		guarded, tlsCfg, err := o.secure.Wrap(m.MetricsHandler())
		if err != nil {
			o.log.Error("netdev-dp: metrics", "err", err)
			return 1
		}
		stopMetrics, err := metricsserver.StartTLS("--metrics-address", o.metricsAddr, m.HandlerWith(guarded), tlsCfg, o.log)
		if err != nil {
			o.log.Error("netdev-dp: metrics", "err", err)
			return 1
		}
		defer stopMetrics()
	}
	if o.mode == "dra" {
		return runDRA(ctx, cfg, o.dra, o.kubeconfig, o.log)
	}
	if err := dpmode.Run(ctx, cfg, m, o.log); err != nil {
		o.log.Error("netdev-dp failed", "err", err)
		return 1
	}
	o.log.Info("netdev-dp stopped")
	return 0
}

// parse reads the command line; a nil options means exit with the code (0 for
// --help and --version, which it printed).
func parse(args []string, stdout, stderr io.Writer) (*options, int) {
	fs := flag.NewFlagSet("netdev-dp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.configPath, "config", "", "config file (JSON): netdev-dp's, or the SR-IOV network device plugin's (resourceList); required")
	fs.StringVar(&o.configPath, "config-file", "", "same as --config (the SR-IOV network device plugin's flag)")
	fs.StringVar(&o.resourcePrefix, "resource-prefix", sriovdp.DefaultPrefix, "an SR-IOV network device plugin config's resource prefix where a resource gives no resourcePrefix")
	fs.StringVar(&o.pluginDir, "plugin-dir", "", "kubelet device plugin dir (default /var/lib/kubelet/device-plugins/)")
	fs.StringVar(&o.devinfoDir, "devinfo-dir", "", "device-info dir holding dp/ (default /var/run/k8s.cni.cncf.io/devinfo)")
	fs.StringVar(&o.cdiDir, "cdi-dir", "", "CDI spec dir (default /var/run/cdi)")
	fs.StringVar(&o.sysfsRoot, "sysfs-root", "", "sysfs mount (default /sys)")
	fs.StringVar(&o.podResourcesSocket, "pod-resources-socket", "", "the kubelet's PodResources socket, asked which devices pods hold at stop and when devices have left the host: "+
		"their device-info files and CDI spec entries stay (default "+podresources.DefaultSocket+")")
	logFlags := logging.Register(fs)
	debug := fs.Bool("debug", false, "same as --log-level debug (kept for old command lines)")
	fs.StringVar(&o.metricsAddr, "metrics-address", "", "serve /metrics, /healthz and /readyz on this address (host:port); empty: off")
	fs.DurationVar(&o.healthGrace, "health-grace", metrics.DefaultGrace, "how long the kubelet registration may be missing, "+
		"or published ResourceSlices missing from the API server (dra mode), before /healthz fails")
	o.secure.Register(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&o.mode, "mode", "deviceplugin", "deviceplugin or dra")
	fs.BoolVar(&o.printClasses, "print-device-classes", false, "print a DeviceClass per resource of the config (for --driver-name, "+
		"with the resource as its extendedResourceName) as YAML to apply, and exit")
	draFlags(fs, &o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, 0 // asked for, and printed: not an error
		}
		return nil, 2
	}
	fs.Visit(func(f *flag.Flag) { o.resourcePrefixSet = o.resourcePrefixSet || f.Name == "resource-prefix" })
	if *showVersion {
		fmt.Fprintln(stdout, version.Line("netdev-dp"))
		return nil, 0
	}
	if *debug {
		logFlags.Level = "debug"
	}
	var err error
	if o.log, err = logFlags.New(stderr); err == nil {
		err = checkMode(o.mode)
	}
	if err == nil && o.healthGrace < 0 {
		err = fmt.Errorf("--health-grace %s: must not be negative", o.healthGrace)
	}
	if err != nil {
		fmt.Fprintf(stderr, "netdev-dp: %v\n", err)
		return nil, 2
	}
	if o.configPath == "" || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "netdev-dp: --config FILE is required and no other arguments are taken")
		fs.Usage()
		return nil, 2
	}
	return &o, 0
}

// loadConfig reads the config file: the SR-IOV network device plugin's when
// it has its shape (a top-level resourceList), else netdev-dp's own.
func loadConfig(o *options) (*resources.Config, error) {
	data, err := resources.ReadConfigFile(o.configPath)
	if err != nil {
		return nil, err
	}
	if sriovdp.IsConfig(data) {
		cfg, err := sriovdp.Parse(data, o.resourcePrefix)
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", o.configPath, err)
		}
		return cfg, nil
	}
	if o.resourcePrefixSet {
		return nil, fmt.Errorf("config %s: --resource-prefix applies to an SR-IOV network device plugin config (with resourceList) only; netdev-dp's own config names each resource in full", o.configPath)
	}
	cfg, err := resources.ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", o.configPath, err)
	}
	return cfg, nil
}

// printDeviceClasses writes the DeviceClasses that serve cfg's resources
// through driver as one YAML stream.
func printDeviceClasses(cfg *resources.Config, driver string, stdout io.Writer, log *slog.Logger) int {
	classes, err := dramode.DeviceClasses(cfg, driver)
	if err != nil {
		log.Error("netdev-dp: DeviceClasses", "err", err)
		return 1
	}
	for _, c := range classes {
		b, err := yaml.Marshal(c)
		if err != nil {
			log.Error("netdev-dp: DeviceClass", "name", c.Name, "err", err)
			return 1
		}
		fmt.Fprintf(stdout, "---\n%s", b)
	}
	return 0
}

// draFlags registers the flags of DRA mode.
func draFlags(fs *flag.FlagSet, opts *options) {
	o := &opts.dra
	fs.StringVar(&o.DriverName, "driver-name", dramode.DefaultDriverName, "dra mode: the DRA driver name (and its attributes' domain)")
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "dra mode: this node's name (default $NODE_NAME)")
	fs.StringVar(&o.RegistrarDir, "kubelet-registrar-dir", kubeletplugin.KubeletRegistryDir, "dra mode: the kubelet's plugin registration dir")
	fs.StringVar(&o.PluginsDir, "kubelet-plugins-dir", kubeletplugin.KubeletPluginsDir, "dra mode: the kubelet's plugins dir (socket in <dir>/<driver>/dra.sock)")
	fs.StringVar(&opts.kubeconfig, "kubeconfig", "", "dra mode: kubeconfig file (default: the pod's service account)")
	fs.BoolVar(&o.Metadata, "device-metadata", true, "dra mode: write each prepared device's metadata (KEP-5304) for its containers, "+
		"mounted through CDI at /var/run/kubernetes.io/dra-device-attributes/...")
}

// checkMode refuses an unknown mode.
func checkMode(mode string) error {
	if mode != "deviceplugin" && mode != "dra" {
		return fmt.Errorf("--mode %q: want deviceplugin or dra", mode)
	}
	return nil
}

// runDRA serves cfg as a DRA driver until ctx ends.
func runDRA(ctx context.Context, cfg *resources.Config, o dramode.Options, kubeconfig string, log *slog.Logger) int {
	client, err := dramode.NewClient(kubeconfig)
	if err == nil {
		o.Client = client
		var d *dramode.Driver
		if d, err = dramode.New(cfg, o, log); err == nil {
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

func override(field *string, flagValue string) {
	if flagValue != "" {
		*field = flagValue
	}
}
