// Command cdi-adapter serves each binary of the 2017 CDI draft configured in
// /etc/cdi/<resource-type>.d/*.conf as a kubelet device plugin with CDI
// devices (see pkg/cdiadapter). It stops on SIGTERM or SIGINT.
//
//	cdi-adapter [--conf-dir DIR] [--bin-dir DIR] [--vendor DOMAIN] [--plugin-dir DIR]
//	            [--pod-resources SOCKET] [--cdi-dir DIR] [--state-dir DIR] [--poll D] [--grace D] [--timeout D]
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

	"github.com/devplumb/devplumb/pkg/cdiadapter"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("cdi-adapter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg cdiadapter.Config
	fs.StringVar(&cfg.ConfDir, "conf-dir", "", "the draft's configs (default /etc/cdi)")
	fs.StringVar(&cfg.BinDir, "bin-dir", "", "the draft's binaries (default /opt/cdi/bin)")
	fs.StringVar(&cfg.Vendor, "vendor", "", "domain of resource names and CDI kinds (default "+cdiadapter.DefaultVendor+")")
	fs.StringVar(&cfg.PluginDir, "plugin-dir", "", "kubelet device plugin dir (default /var/lib/kubelet/device-plugins/)")
	fs.StringVar(&cfg.PodResourcesSocket, "pod-resources", "", "kubelet PodResources socket (default /var/lib/kubelet/pod-resources/kubelet.sock)")
	fs.StringVar(&cfg.CDIDir, "cdi-dir", "", "CDI spec dir (default /var/run/cdi)")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "the adapter's allocations (default "+cdiadapter.DefaultStateDir+")")
	fs.DurationVar(&cfg.Poll, "poll", cdiadapter.DefaultPoll, "PodResources poll interval")
	fs.DurationVar(&cfg.Grace, "grace", cdiadapter.DefaultGrace, "how long an allocation no pod ever showed is kept")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "per binary call (default 30s)")
	debug := fs.Bool("debug", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(stderr, "cdi-adapter: no arguments are taken, only flags")
		return 2
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := cdiadapter.Run(ctx, cfg, log); err != nil {
		log.Error("cdi-adapter failed", "err", err)
		return 1
	}
	log.Info("cdi-adapter stopped")
	return 0
}
