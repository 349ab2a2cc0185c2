package adapter

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
	"github.com/devplumb/devplumb/podresources"
	"golang.org/x/sync/errgroup"
)

// Run serves every configured binary until ctx ends. It fails early when
// no config is found, a folder holds more than one config (one binary per
// resource-type), a binary is missing or does not speak its config's
// version, or another instance serves a resource. CDI specs and state stay
// when it stops: they describe allocations that running pods still hold.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	cfg.defaults()
	resources, err := build(&cfg, log)
	if err != nil {
		return err
	}
	// Allocations made before this moment are checked against PodResources
	// at once: their Allocate calls ended with the last run.
	startedAt := time.Now()
	for _, r := range resources {
		if err := r.dp.CheckSocketFree(); err != nil {
			return err
		}
		if err := r.start(ctx); err != nil {
			return fmt.Errorf("resource %s: %w", r.name, err)
		}
	}
	return serve(ctx, &cfg, resources, startedAt, log)
}

// build discovers the configs and makes one resource per config.
func build(cfg *Config, log *slog.Logger) ([]*resource, error) {
	found, err := protocol.Discover(cfg.ConfDir)
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no CDI configs (<resource-type>.d/*.conf) in %s", cfg.ConfDir)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("adapter state dir: %w", err)
	}
	byType := map[string]string{}
	for _, cf := range found {
		if other, dup := byType[cf.Config.Type]; dup {
			return nil, fmt.Errorf("CDI configs %s and %s both serve %s: the adapter serves one binary per resource-type", other, cf.Path, cf.Config.Type)
		}
		byType[cf.Config.Type] = cf.Path
	}
	var out []*resource
	for _, cf := range found {
		r, err := newResource(cfg, cf, log)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// serve runs the device plugins and the PodResources poll until ctx ends or
// a plugin cannot serve.
func serve(ctx context.Context, cfg *Config, resources []*resource, startedAt time.Time, log *slog.Logger) error {
	// One context for all: the first plugin that fails stops the others.
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { poll(ctx, cfg, resources, startedAt, log); return nil })
	for _, r := range resources {
		g.Go(func() error { return r.dp.Run(ctx) })
	}
	return g.Wait()
}

// poll lists PodResources every cfg.Poll and reconciles each resource. The
// first successful list is the restart check of allocations made before
// startedAt.
func poll(ctx context.Context, cfg *Config, resources []*resource, startedAt time.Time, log *slog.Logger) {
	var client *podresources.Client
	defer func() {
		if client != nil {
			client.Close()
		}
	}()
	restoredBefore := startedAt
	ticker := time.NewTicker(cfg.Poll)
	defer ticker.Stop()
	for {
		if client == nil {
			c, err := podresources.New(cfg.PodResourcesSocket, podresources.WithLogger(log))
			if err != nil {
				log.Warn("PodResources not reachable yet", "err", err)
			}
			client = c
		}
		if client != nil {
			if pods, err := client.List(ctx); err != nil {
				if ctx.Err() == nil {
					log.Warn("PodResources List failed; nothing is freed until it answers", "err", err)
				}
			} else {
				for _, r := range resources {
					r.reconcile(ctx, pods, restoredBefore, cfg.Grace)
				}
				restoredBefore = time.Time{}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
