// Command netdev-dp is the reference device plugin for network devices:
// PCI PFs/VFs, named netdevs, vDPA devices, vhost-user and memif sockets.
// It advertises them to the kubelet, writes their CDI specs and device-info
// files, and removes all of it on SIGTERM or SIGINT.
//
//	netdev-dp --config FILE [--plugin-dir DIR] [--devinfo-dir DIR] [--cdi-dir DIR] [--sysfs-root DIR]
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

	"github.com/devplumb/devplumb/pkg/netdevdp"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("netdev-dp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (JSON); required")
	pluginDir := fs.String("plugin-dir", "", "kubelet device plugin dir (default /var/lib/kubelet/device-plugins/)")
	devinfoDir := fs.String("devinfo-dir", "", "device-info dir holding dp/ (default /var/run/k8s.cni.cncf.io/devinfo)")
	cdiDir := fs.String("cdi-dir", "", "CDI spec dir (default /var/run/cdi)")
	sysfsRoot := fs.String("sysfs-root", "", "sysfs mount (default /sys)")
	debug := fs.Bool("debug", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
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
	if err := netdevdp.Run(ctx, cfg, log); err != nil {
		log.Error("netdev-dp failed", "err", err)
		return 1
	}
	log.Info("netdev-dp stopped")
	return 0
}

func override(field *string, flagValue string) {
	if flagValue != "" {
		*field = flagValue
	}
}
