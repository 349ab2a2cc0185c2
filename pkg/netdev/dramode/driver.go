// Package dramode is netdev-dp's DRA mode: the same device sources as its
// device plugin mode (pkg/netdev/dpmode; both open them with
// pkg/netdev/resources), served as a DRA driver with the kubelet plugin
// helper of k8s.io/dynamic-resource-allocation (kubeletplugin). It publishes
// one ResourceSlice pool per node (named after the node) with every
// device, its attributes (attrs.go) and its name (DeviceName), an unhealthy
// one with a NoSchedule taint, and reports the devices' health to the
// kubelet over its health stream (health.go); it prepares a
// claim by writing its devices' CDI spec entries and DP device-info files
// and answering their CDI names, "<resourceName>=<cdispec.DeviceName(ID)>"
// as in device-plugin mode; unprepare removes them. Prepared claims are
// checkpointed, so they stay prepared across a restart of the driver, and
// stopping the driver leaves them as they are (pods use them). A shareable
// resource's devices are published for many claims with consumable capacity
// (share.go), and each share is prepared as a device of its own.
package dramode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
)

// DefaultDriverName is the driver's name and its attributes' domain.
const DefaultDriverName = "netdev.devplumb.io"

// Options are what DRA mode needs besides the config file.
type Options struct {
	DriverName   string               // default DefaultDriverName
	NodeName     string               // required: the pool's name and the slices' node
	RegistrarDir string               // default kubeletplugin.KubeletRegistryDir
	PluginsDir   string               // default kubeletplugin.KubeletPluginsDir; ours is <dir>/<driver>
	Client       kubernetes.Interface // required
	Observer     Observer             // optional: told what the driver does (metrics, probes; observe.go)
	Metadata     bool                 // write KEP-5304 device metadata for the containers (metadata.go)
}

// res is one configured resource.
type res struct {
	name   string
	source source.Source
	cdi    *cdispec.Writer
	share  *netshare.Policy   // nil: each device goes to one claim
	pfBW   *pfBandwidth       // nil: VFs consume no counters
	sriov  *resources.SRIOVDP // a resource of the SR-IOV device plugin's config, else nil
}

// Driver serves the device sources of one config as a DRA driver.
type Driver struct {
	name, pool, sysfs string
	opts              Options
	log               *slog.Logger
	resources         []*res
	owners            *resources.Owners
	store             *devinfo.Store
	claims            checkpoints
	resync            time.Duration // rescan period besides source events

	mu        sync.Mutex
	devices   map[string]entry // published devices by slice device name
	published *resourceslice.DriverResources
	problems  []string // reported at the last sync, to report each once
	conflicts []string // devices two resources select, at the last sync
	prepared  map[types.UID]*record
	health    healthState
	noTaints  bool          // the API server drops device taints: leave unhealthy devices out
	kick      chan struct{} // asks the watch loop for a sync
	confirm   confirmer     // checks that the API server holds the published slices (observe.go)

	fatalMu sync.Mutex
	fatal   error                   // set by HandleError: ends Run
	stop    context.CancelCauseFunc // set by Run
}

// New checks cfg and o, opens the device sources and takes over the claims an
// earlier run prepared (their files are written again if missing).
func New(cfg *resources.Config, o Options, log *slog.Logger) (*Driver, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o = withDefaults(o)
	if o.NodeName == "" {
		return nil, errors.New("DRA mode needs the node name (--node-name or NODE_NAME)")
	}
	opened, err := resources.Open(cfg, log)
	if err != nil {
		return nil, err
	}
	d := &Driver{
		name: o.DriverName, pool: o.NodeName, sysfs: cfg.SysfsRoot, opts: o,
		log:    log.With("driver", o.DriverName),
		owners: resources.NewOwners(), store: devinfo.NewStore(cfg.DevInfoDir),
		claims:   checkpoints{dir: filepath.Join(o.PluginsDir, o.DriverName, "claims")},
		prepared: map[types.UID]*record{}, kick: make(chan struct{}, 1),
	}
	d.resync = cfg.Resync.Duration
	if d.resync <= 0 {
		d.resync = resources.DefaultResync
	}
	if d.sysfs == "" {
		d.sysfs = sysfs.DefaultRoot
	}
	for i, o := range opened { // Open keeps config order
		r := &res{name: o.ResourceName, source: o.Source, cdi: o.CDI, sriov: o.SRIOVDP}
		if err := r.configure(cfg.Resources[i]); err != nil {
			return nil, fmt.Errorf("resource %s: %w", o.ResourceName, err)
		}
		d.resources = append(d.resources, r)
	}
	if err := resources.OwnDPDir(cfg.DevInfoDir); err != nil {
		return nil, err
	}
	if err := d.restore(); err != nil {
		return nil, err
	}
	return d, nil
}

func withDefaults(o Options) Options {
	if o.DriverName == "" {
		o.DriverName = DefaultDriverName
	}
	if o.RegistrarDir == "" {
		o.RegistrarDir = kubeletplugin.KubeletRegistryDir
	}
	if o.PluginsDir == "" {
		o.PluginsDir = kubeletplugin.KubeletPluginsDir
	}
	return o
}

// Run publishes the slices and serves the kubelet until ctx ends or a fatal
// error (HandleError) stops it. A device overlap at start is an error, as
// in device-plugin mode.
func (d *Driver) Run(ctx context.Context) error {
	if d.opts.Client == nil {
		return errors.New("DRA mode needs a Kubernetes client")
	}
	if err := d.sync(); err != nil {
		return err
	}
	if err := d.conflictsAtStart(); err != nil {
		return err
	}
	ctx, stop := context.WithCancelCause(withKlog(ctx, d.log))
	defer stop(nil)
	d.fatalMu.Lock()
	d.stop = stop
	d.fatalMu.Unlock()
	dataDir := filepath.Join(d.opts.PluginsDir, d.name)
	for _, dir := range []string{dataDir, d.opts.RegistrarDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("DRA plugin dir: %w", err)
		}
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(d.name),
		kubeletplugin.NodeName(d.pool),
		kubeletplugin.KubeClient(d.opts.Client),
		kubeletplugin.GRPCInterceptor(d.observeGRPC),
		kubeletplugin.EnableDeviceMetadata(d.opts.Metadata, metadataVersions), kubeletplugin.CDIDirectory(d.cdiDir()),
		kubeletplugin.RegistrarDirectoryPath(d.opts.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir))
	if err != nil {
		return fmt.Errorf("start DRA kubelet plugin %s: %w", d.name, err)
	}
	defer helper.Stop()
	d.log.Info("serving as a DRA driver", "node", d.pool, "socket", filepath.Join(dataDir, "dra.sock"), "registrar", d.opts.RegistrarDir)
	d.watch(ctx, d.observed(helper))
	return d.fatalErr()
}

// HandleError is kubeletplugin's report of a background error: a
// recoverable one (publishing slices) is logged, any other ends Run.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.log.Error(msg, "err", err)
		d.checkTaintsDropped(err)
		d.observeSliceError(err)
		return
	}
	d.fatalMu.Lock()
	defer d.fatalMu.Unlock()
	if d.fatal == nil {
		d.fatal = fmt.Errorf("%s: %w", msg, err)
	}
	if d.stop != nil {
		d.stop(d.fatal)
	}
}

func (d *Driver) fatalErr() error {
	d.fatalMu.Lock()
	defer d.fatalMu.Unlock()
	return d.fatal
}
