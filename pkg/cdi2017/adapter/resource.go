package adapter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/devplumb/devplumb/pkg/cdi2017/protocol"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// resource serves one config's binary as one device plugin resource.
type resource struct {
	name    string // <vendor>/<type>
	typ     string
	bin     *protocol.Binary
	version string // the config's cdiVersion, which the binary supports
	dp      *deviceplugin.Server
	cdi     *cdispec.Writer
	state   stateFile
	log     *slog.Logger

	mu     sync.Mutex
	allocs map[string]*allocation // by request ID
	free   int64                  // INFO's last count
}

func newResource(cfg *Config, cf *protocol.ConfigFile, log *slog.Logger) (*resource, error) {
	bin, err := protocol.NewBinary(cf, cfg.BinDir)
	if err != nil {
		return nil, err
	}
	bin.Timeout = cfg.Timeout
	r := &resource{name: cfg.resourceName(cf.Config.Type), typ: cf.Config.Type, bin: bin, version: cf.Config.CDIVersion,
		state: stateFile{path: statePath(cfg.StateDir, cf.Config.Type)}, log: log.With("resource", cfg.resourceName(cf.Config.Type))}
	if r.cdi, err = cdispec.New(cfg.CDIDir, r.name); err != nil {
		return nil, fmt.Errorf("CDI config %s: %w", cf.Path, err)
	}
	r.dp, err = deviceplugin.New(deviceplugin.Config{ResourceName: r.name, PluginDir: cfg.PluginDir,
		Allocate: r.allocate, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("CDI config %s: %w", cf.Path, err)
	}
	return r, nil
}

// start checks the binary's versions and INFO, loads the recorded
// allocations and writes their CDI spec.
func (r *resource) start(ctx context.Context) error {
	v, err := r.bin.Version(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(v.SupportedVersions, r.version) {
		return fmt.Errorf("CDI binary %s supports %v, not its config's cdiVersion %s", r.bin.Path, v.SupportedVersions, r.version)
	}
	// A binary that cannot say what it has fails the start, not later.
	if _, err := r.bin.Info(ctx, r.version); err != nil {
		return err
	}
	if r.allocs, err = r.state.load(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked(ctx)
	return r.writeSpecLocked()
}

// refreshLocked asks INFO for the free count and advertises the slots: the
// held ones and as many free ones as INFO counts.
func (r *resource) refreshLocked(ctx context.Context) {
	avail, err := r.bin.Info(ctx, r.version)
	if err != nil {
		r.log.Error("INFO failed; keeping the last device list", "err", err)
	} else {
		r.free = avail[r.typ]
	}
	held := map[string]bool{}
	for _, a := range r.allocs {
		for _, s := range a.Slots {
			held[s] = true
		}
	}
	devs := make([]deviceplugin.Device, 0, len(held)+int(r.free))
	for s := range held {
		devs = append(devs, deviceplugin.Device{ID: s, Healthy: true, NUMANode: deviceplugin.NoNUMA})
	}
	for i, added := 0, int64(0); added < r.free; i++ {
		if s := r.slot(i); !held[s] {
			devs = append(devs, deviceplugin.Device{ID: s, Healthy: true, NUMANode: deviceplugin.NoNUMA})
			added++
		}
	}
	r.dp.Update(devs)
}

func (r *resource) slot(i int) string { return fmt.Sprintf("%s-%d", r.typ, i) }

// writeSpecLocked makes the CDI spec list every allocation with devices.
func (r *resource) writeSpecLocked() error {
	var devs []source.Device
	ids := make([]string, 0, len(r.allocs))
	for id := range r.allocs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		a := r.allocs[id]
		if a.Devices == nil {
			continue
		}
		d := source.Device{Device: deviceplugin.Device{ID: id, Healthy: true, NUMANode: deviceplugin.NoNUMA}}
		for _, p := range uniq(a.Devices) {
			d.DevNodes = append(d.DevNodes, source.DevNode{HostPath: p, ContainerPath: p, Permissions: "rw"})
		}
		devs = append(devs, d)
	}
	return r.cdi.Write(devs)
}

// uniq drops repeated paths: a reply may name one node for several devices.
func uniq(paths []string) []string {
	var out []string
	for _, p := range paths {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// newRequestID is a random request-id (24 hex digits: alnum, by the ABNF).
func newRequestID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}
