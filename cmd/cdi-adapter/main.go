// Command cdi-adapter serves each binary of the 2017 CDI draft configured in
// /etc/cdi/<resource-type>.d/*.conf as a kubelet device plugin with CDI
// devices (see pkg/cdi2017/adapter). It stops on SIGTERM or SIGINT.
//
//	cdi-adapter [--conf-dir DIR] [--bin-dir DIR] [--vendor DOMAIN] [--plugin-dir DIR]
//	            [--pod-resources SOCKET] [--cdi-dir DIR] [--state-dir DIR] [--poll D] [--grace D] [--timeout D]
//	            [--log-level LEVEL] [--log-format text|json]
//	cdi-adapter --version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/devplumb/devplumb/pkg/base/logging"
	"github.com/devplumb/devplumb/pkg/base/version"
	"github.com/devplumb/devplumb/pkg/cdi2017/adapter"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cdi-adapter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg adapter.Config
	fs.StringVar(&cfg.ConfDir, "conf-dir", "", "the draft's configs (default /etc/cdi)")
	fs.StringVar(&cfg.BinDir, "bin-dir", "", "the draft's binaries (default /opt/cdi/bin)")
	fs.StringVar(&cfg.Vendor, "vendor", "", "domain of resource names and CDI kinds (default "+adapter.DefaultVendor+")")
	fs.StringVar(&cfg.PluginDir, "plugin-dir", "", "kubelet device plugin dir (default /var/lib/kubelet/device-plugins/)")
	fs.StringVar(&cfg.PodResourcesSocket, "pod-resources", "", "kubelet PodResources socket (default /var/lib/kubelet/pod-resources/kubelet.sock)")
	fs.StringVar(&cfg.CDIDir, "cdi-dir", "", "CDI spec dir (default /var/run/cdi)")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "the adapter's allocations (default "+adapter.DefaultStateDir+")")
	fs.DurationVar(&cfg.Poll, "poll", adapter.DefaultPoll, "PodResources poll interval")
	fs.DurationVar(&cfg.Grace, "grace", adapter.DefaultGrace, "how long an allocation no pod ever showed is kept")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "per binary call (default 30s)")
	logFlags := logging.Register(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, version.Line("cdi-adapter"))
		return 0
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(stderr, "cdi-adapter: no arguments are taken, only flags")
		return 2
	}
	log, err := logFlags.New(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "cdi-adapter: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := adapter.Run(ctx, cfg, log); err != nil {
		log.Error("cdi-adapter failed", "err", err)
		return 1
	}
	log.Info("cdi-adapter stopped")
	return 0
}
