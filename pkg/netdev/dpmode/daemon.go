package dpmode

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/netdev/metrics"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"golang.org/x/sync/errgroup"
)

// Run starts every resource and serves until ctx ends. Then it stops the
// plugins (their sockets go), removes the device-info files and CDI spec
// entries it wrote of the devices no pod holds (see cleanup), and returns. It fails early on anything a config or host problem
// causes at start (bad source config, unreadable sysfs, unwritable dirs).
// m, when not nil, counts what every resource's plugin does.
func Run(ctx context.Context, cfg *resources.Config, m *metrics.Metrics, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	rs, err := build(cfg, m, log)
	if err != nil {
		return err
	}
	// A second instance must not touch the files of a running one: its
	// cleanup would remove them.
	for _, r := range rs {
		if err := r.dp.CheckSocketFree(); err != nil {
			return err
		}
	}
	defer cleanup(rs, cfg.PodResourcesSocket, log)
	if err := resources.OwnDPDir(cfg.DevInfoDir); err != nil {
		return err
	}
	if err := adopt(rs, devinfo.NewStore(cfg.DevInfoDir)); err != nil {
		return err
	}
	// Everything is described before any plugin registers.
	for _, r := range rs {
		if err := r.sync(); err != nil {
			return err
		}
	}
	if err := conflictsAtStart(rs); err != nil {
		return err
	}
	return serve(ctx, cfg, rs)
}

// build opens the sources and makes the resources.
func build(cfg *resources.Config, m *metrics.Metrics, log *slog.Logger) ([]*resource, error) {
	opened, err := resources.Open(cfg, log)
	if err != nil {
		return nil, err
	}
	store := devinfo.NewStore(cfg.DevInfoDir)
	own := resources.NewOwners()
	var out []*resource
	for i, o := range opened {
		r, err := newResource(o.ResourceName, o.Source, cfg.PluginDir, o.CDI, store, own, log, m)
		if err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		r.sriov = o.SRIOVDP
		r.held = func() (map[string]bool, error) {
			h, err := heldDevices(cfg.PodResourcesSocket, log)
			return h[o.ResourceName], err
		}
		out = append(out, r)
	}
	return out, nil
}

// serve runs plugins, source watchers, rescans and the resync ticker until
// ctx ends or a plugin cannot serve.
func serve(ctx context.Context, cfg *resources.Config, rs []*resource) error {
	resync := cfg.Resync.Duration
	if resync <= 0 {
		resync = resources.DefaultResync
	}
	// One context for all: the first server that fails stops the others.
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { tick(ctx, resync, rs); return nil })
	for _, r := range rs {
		g.Go(func() error { return r.dp.Run(ctx) })
		g.Go(func() error { r.run(ctx); return nil })
		g.Go(func() error { watch(ctx, r); return nil })
	}
	return g.Wait()
}

// tick asks every resource for a rescan each resync period until ctx ends.
func tick(ctx context.Context, resync time.Duration, rs []*resource) {
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			for _, r := range rs {
				r.changed()
			}
		}
	}
}

// watch follows a source's own change events, if it has any.
func watch(ctx context.Context, r *resource) {
	n, ok := r.source.(source.Notifier)
	if !ok {
		return
	}
	if err := n.Watch(ctx, r.changed); err != nil {
		r.log.Error("watching the device source failed; relying on periodic rescans", "err", err)
		r.metrics.Error(r.name, "watch")
	}
}

// conflictsAtStart fails the start when resources overlap.
func conflictsAtStart(rs []*resource) error {
	var all []string
	for _, r := range rs {
		r.mu.Lock()
		all = append(all, r.conflicts...)
		r.mu.Unlock()
	}
	return resources.OverlapError(all, "pods")
}
