package dramode

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Observer hears what the driver does, for metrics and probes
// (pkg/netdev/metrics implements it). Its methods are called from the
// kubelet's gRPC calls, the sync loop and background goroutines: they must be
// safe for concurrent use and return at once.
type Observer interface {
	// Scanned gives each resource's devices after a scan, healthy or not.
	Scanned(resource string, healthy, unhealthy int)
	// Published is a hand-over of the pool to the ResourceSlice controller:
	// slices and devices in it; err when the controller was not started.
	Published(slices, devices int, err error)
	// SlicesInSync: the API server holds exactly the devices published last.
	SlicesInSync()
	// SliceError is a failure of the ResourceSlice controller (it retries).
	SliceError(err error)
	// Claim is one claim prepared or unprepared (op "prepare", "unprepare").
	Claim(op string, took time.Duration, err error)
	// Registered is the kubelet's NotifyRegistrationStatus: it took the
	// driver (ok) or refused it. A kubelet registers the driver again when
	// it restarts.
	Registered(ok bool)
}

// RegistrationSocket is where the kubelet finds the driver of o: a socket
// that, once gone, no kubelet finds again until the driver restarts.
func RegistrationSocket(o Options) string {
	o = withDefaults(o)
	return filepath.Join(o.RegistrarDir, o.DriverName+"-reg.sock")
}

// methodNotify is the kubelet's call that ends a registration, as
// kubeletplugin's registration server serves it.
const methodNotify = "/pluginregistration.Registration/NotifyRegistrationStatus"

// observeGRPC is a gRPC interceptor on both of kubeletplugin's servers: it
// tells the observer of the kubelet's registrations.
func (d *Driver) observeGRPC(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	resp, err := next(ctx, req)
	if o := d.opts.Observer; o != nil && info.FullMethod == methodNotify {
		st, _ := req.(*registerapi.RegistrationStatus)
		o.Registered(err == nil && st != nil && st.PluginRegistered)
	}
	return resp, err
}

// observeClaim tells the observer of one prepared or unprepared claim.
func (d *Driver) observeClaim(op string, start time.Time, err error) {
	if d.opts.Observer != nil {
		d.opts.Observer.Claim(op, time.Since(start), err)
	}
}

// observeScan tells the observer how many devices each resource has.
func (d *Driver) observeScan(scans []scanned) {
	if d.opts.Observer == nil {
		return
	}
	for _, s := range scans {
		healthy := 0
		for _, dev := range s.devs {
			if dev.Healthy {
				healthy++
			}
		}
		d.opts.Observer.Scanned(s.res.name, healthy, len(s.devs)-healthy)
	}
}

// observeSliceError tells the observer of a failure of the ResourceSlice
// controller (kubeletplugin reports them as recoverable errors).
func (d *Driver) observeSliceError(err error) {
	if d.opts.Observer != nil {
		d.opts.Observer.SliceError(err)
	}
}

// confirmer checks that the API server holds what was published: the
// ResourceSlice controller writes asynchronously and reports only failures.
type confirmer struct {
	mu     sync.Mutex
	cancel context.CancelFunc // of the check of the previous publish
}

// observePublish tells the observer of a publish and starts checking that the
// API server holds it, replacing the check of an earlier publish.
func (d *Driver) observePublish(ctx context.Context, r resourceslice.DriverResources, err error) {
	o := d.opts.Observer
	if o == nil {
		return
	}
	want := poolDevices(r, d.pool)
	o.Published(len(r.Pools[d.pool].Slices), len(want), err)
	if err != nil || d.opts.Client == nil {
		return
	}
	d.confirm.mu.Lock()
	defer d.confirm.mu.Unlock()
	if d.confirm.cancel != nil {
		d.confirm.cancel()
	}
	cctx, cancel := context.WithCancel(ctx)
	d.confirm.cancel = cancel
	go d.confirmSlices(cctx, want)
}

// confirmSlices lists the node's slices of this driver until they hold
// exactly want, backing off from one second to ten between lists.
func (d *Driver) confirmSlices(ctx context.Context, want []string) {
	wait := time.Second
	for {
		have, err := d.sliceDevices(ctx)
		if err == nil && slices.Equal(have, want) {
			d.opts.Observer.SlicesInSync()
			return
		}
		if err != nil && ctx.Err() == nil {
			d.log.Debug("checking the published ResourceSlices", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// sliceDevices are the sorted device names of this node's pool in the API server.
func (d *Driver) sliceDevices(ctx context.Context) ([]string, error) {
	l, err := d.opts.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + d.pool + ",spec.driver=" + d.name})
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices: %w", err)
	}
	var out []string
	for _, s := range l.Items {
		if s.Spec.Pool.Name != d.pool {
			continue
		}
		for _, dev := range s.Spec.Devices {
			out = append(out, dev.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// poolDevices are the sorted device names of one pool of r.
func poolDevices(r resourceslice.DriverResources, pool string) []string {
	var out []string
	for _, s := range r.Pools[pool].Slices {
		for _, dev := range s.Devices {
			out = append(out, dev.Name)
		}
	}
	slices.Sort(out)
	return out
}

// observedPublisher tells the observer of every publish.
type observedPublisher struct {
	d    *Driver
	next publisher
}

func (p observedPublisher) PublishResources(ctx context.Context, r resourceslice.DriverResources) error {
	err := p.next.PublishResources(ctx, r)
	p.d.observePublish(ctx, r, err)
	return err
}

// observed wraps the publisher the slices go to, so publishes are observed.
func (d *Driver) observed(p publisher) publisher { return observedPublisher{d: d, next: p} }
