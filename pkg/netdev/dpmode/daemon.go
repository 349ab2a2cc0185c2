package dpmode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/netdev/source/socket"
	"github.com/devplumb/devplumb/pkg/netdev/source/vdpa"
)

// Run starts every resource and serves until ctx ends. Then it stops the
// plugins (their sockets go), removes the device-info files and CDI specs it
// wrote, and returns. It fails early on anything a config or host problem
// causes at start (bad pool config, unreadable sysfs, unwritable dirs).
func Run(ctx context.Context, cfg *Config, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	resources, err := build(cfg, log)
	if err != nil {
		return err
	}
	// A second instance must not touch the files of a running one: its
	// cleanup would remove them.
	for _, r := range resources {
		if err := r.dp.CheckSocketFree(); err != nil {
			return err
		}
	}
	defer cleanup(resources, log)
	if err := OwnDPDir(cfg.DevInfoDir); err != nil {
		return err
	}
	if err := adopt(resources, devinfo.NewStore(cfg.DevInfoDir)); err != nil {
		return err
	}
	// Everything is described before any plugin registers.
	for _, r := range resources {
		if err := r.sync(); err != nil {
			return err
		}
	}
	if err := conflictsAtStart(resources); err != nil {
		return err
	}
	return serve(ctx, cfg, resources)
}

// OwnDPDir gives the device-info dp/ directory the mode netdev-dp needs: the NAD client
// library (which Multus and the SR-IOV device plugin use) creates the device-info
// directories with mode 000, which netdev-dp's DaemonSet, without CAP_DAC_OVERRIDE,
// could not list or write. dp/ is the device plugins' directory; netdev-dp is one.
func OwnDPDir(devinfoDir string) error {
	dp := filepath.Join(devinfo.NewStore(devinfoDir).Dir, devinfo.KindDP)
	st, err := os.Stat(dp)
	if errors.Is(err, os.ErrNotExist) {
		return nil // made with the right mode on the first write
	}
	if err != nil {
		return fmt.Errorf("device-info directory: %w", err)
	}
	if st.Mode().Perm() != 0o755 {
		if err := os.Chmod(dp, 0o755); err != nil {
			return fmt.Errorf("device-info directory %s has mode %04o and cannot be given 0755: %w", dp, st.Mode().Perm(), err)
		}
	}
	return nil
}

// Pool is one configured resource's device pool and the writer of its CDI
// spec: what both modes serve (device plugin here, DRA in pkg/netdev/dramode).
type Pool struct {
	ResourceName string
	Pool         source.Pool
	CDI          *cdispec.Writer
}

// OpenPools creates every resource's pool and CDI spec writer, in config
// order. cfg must be valid.
func OpenPools(cfg *Config, log *slog.Logger) ([]Pool, error) {
	var out []Pool
	specs := map[string]string{}
	for i, rc := range cfg.Resources {
		pool, err := newPool(rc, cfg.SysfsRoot, log)
		if err != nil {
			return nil, fmt.Errorf("resources[%d] (%s): %w", i, rc.ResourceName, err)
		}
		w, err := cdispec.New(cfg.CDIDir, rc.ResourceName)
		if err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		if other, dup := specs[w.Path()]; dup {
			return nil, fmt.Errorf("resources[%d]: %s and %s would share the CDI spec file %s", i, other, rc.ResourceName, w.Path())
		}
		specs[w.Path()] = rc.ResourceName
		out = append(out, Pool{ResourceName: rc.ResourceName, Pool: pool, CDI: w})
	}
	return out, nil
}

// build creates the pools and resources.
func build(cfg *Config, log *slog.Logger) ([]*resource, error) {
	pools, err := OpenPools(cfg, log)
	if err != nil {
		return nil, err
	}
	store := devinfo.NewStore(cfg.DevInfoDir)
	own := NewOwners()
	var out []*resource
	for i, p := range pools {
		r, err := newResource(p.ResourceName, p.Pool, cfg.PluginDir, p.CDI, store, own, log, cfg.Metrics)
		if err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func newPool(rc Resource, sysfs string, log *slog.Logger) (source.Pool, error) {
	switch {
	case rc.PCI != nil:
		return pci.New(sysfs, *rc.PCI)
	case rc.NetDevs != nil:
		p, err := link.New(*rc.NetDevs, sysfs, log.With("resource", rc.ResourceName))
		if err != nil {
			return nil, err
		}
		// Interfaces that pods hold since before this start are still ours.
		if _, err := p.DiscoverMoved(); err != nil {
			log.Warn("finding interfaces moved into pods before start failed", "resource", rc.ResourceName, "err", err)
		}
		return p, nil
	case rc.VDPA != nil:
		return vdpa.New(sysfs, *rc.VDPA)
	case rc.VhostUser != nil:
		return socket.NewVhostUser(*rc.VhostUser)
	case rc.Memif != nil:
		return socket.NewMemif(*rc.Memif)
	}
	return nil, errors.New("no pool configured")
}

// serve runs plugins, pool watchers, rescans and the resync ticker until ctx
// ends or a plugin cannot serve.
func serve(ctx context.Context, cfg *Config, resources []*resource) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resync := cfg.Resync.Duration
	if resync <= 0 {
		resync = DefaultResync
	}
	var wg sync.WaitGroup
	errc := make(chan error, len(resources))
	for _, r := range resources {
		wg.Add(3)
		go func() {
			defer wg.Done()
			if err := r.dp.Run(ctx); err != nil {
				errc <- err
				cancel()
			}
		}()
		go func() { defer wg.Done(); r.run(ctx) }()
		go func() { defer wg.Done(); watch(ctx, r) }()
	}
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-ticker.C:
			for _, r := range resources {
				r.changed()
			}
		}
	}
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// watch follows a pool's own change events, if it has any.
func watch(ctx context.Context, r *resource) {
	n, ok := r.pool.(source.Notifier)
	if !ok {
		return
	}
	if err := n.Watch(ctx, r.changed); err != nil {
		r.log.Error("watching the pool failed; relying on periodic rescans", "err", err)
		r.metrics.Error(r.name, "watch")
	}
}

func cleanup(resources []*resource, log *slog.Logger) {
	for _, r := range resources {
		if err := r.cleanup(); err != nil {
			log.Error("cleanup", "resource", r.name, "err", err)
		}
	}
}
