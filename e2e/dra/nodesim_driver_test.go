package dra_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
)

// simDriver is a small DRA driver built with kubeletplugin, as a driver
// author would write one: it publishes a ResourceSlice with the given devices
// in a pool named after the node and answers NodePrepareResources with one
// CDI device "<driver>/net=<device>" per allocated device of its own.
type simDriver struct {
	t      *testing.T
	name   string
	node   string
	helper *kubeletplugin.Helper

	mu         sync.Mutex
	prepared   map[types.UID]string // claim UID -> namespace/name, while prepared
	calls      [][]string           // claim names of each NodePrepareResources
	unprepared []types.UID          // every claim NodeUnprepareResources got, in order
	fail       string               // when set, every claim's prepare fails with it
}

// cdiName is the CDI device the test driver answers for a device.
func simCDIName(driver, device string) string { return driver + "/net=" + device }

// startDriver runs a test driver for node under the kubelet root. opts are
// more kubeletplugin options (e.g. NodeV1(false)).
func simStartDriver(t *testing.T, root, node, name string, devices []string, opts ...kubeletplugin.Option) *simDriver {
	t.Helper()
	d := &simDriver{t: t, name: name, node: node, prepared: map[types.UID]string{}}
	// Its DaemonSet would mount this directory with type DirectoryOrCreate.
	if err := os.MkdirAll(filepath.Join(kubeletsim.PluginsDir(root), name), 0o750); err != nil {
		t.Fatal(err)
	}
	all := append([]kubeletplugin.Option{
		kubeletplugin.DriverName(name), kubeletplugin.NodeName(node), kubeletplugin.KubeClient(srv.Client),
		kubeletplugin.RegistrarDirectoryPath(kubeletsim.PluginsRegistryDir(root)),
		kubeletplugin.PluginDataDirectoryPath(filepath.Join(kubeletsim.PluginsDir(root), name)),
	}, opts...)
	h, err := kubeletplugin.Start(context.Background(), d, all...)
	if err != nil {
		t.Fatalf("start test DRA driver %s: %v", name, err)
	}
	d.helper = h
	t.Cleanup(func() {
		h.Stop()
		simDeleteSlices(t, node, name)
	})
	var devs []resourceapi.Device
	for _, dev := range devices {
		devs = append(devs, resourceapi.Device{Name: dev, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"k8s.cni.cncf.io/deviceID": {StringValue: ptr.To(dev)}}})
	}
	err = h.PublishResources(context.Background(), resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{node: {Slices: []resourceslice.Slice{{Devices: devs}}}}})
	if err != nil {
		t.Fatalf("publish ResourceSlice of %s: %v", name, err)
	}
	simWaitSlice(t, node, name, len(devices))
	return d
}

func (d *simDriver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	var names []string
	for _, c := range claims {
		names = append(names, c.Name)
		var res kubeletplugin.PrepareResult
		if d.fail != "" {
			out[c.UID] = kubeletplugin.PrepareResult{Err: errors.New(d.fail)}
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != d.name {
				continue
			}
			res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{r.Request},
				PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: []string{simCDIName(d.name, r.Device)}})
		}
		out[c.UID] = res
		d.prepared[c.UID] = c.Namespace + "/" + c.Name
	}
	slices.Sort(names)
	d.calls = append(d.calls, names)
	return out, nil
}

func (d *simDriver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		delete(d.prepared, c.UID)
		d.unprepared = append(d.unprepared, c.UID)
		out[c.UID] = nil
	}
	return out, nil
}

func (d *simDriver) HandleError(_ context.Context, err error, msg string) {
	d.t.Logf("test DRA driver %s: %s: %v", d.name, msg, err)
}

// WatchHealthStatus: the test driver reports no device health.
func (d *simDriver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (d *simDriver) setFail(msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail = msg
}

// state returns copies of what the driver saw.
func (d *simDriver) state() (prepared map[types.UID]string, calls [][]string, unprepared []types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	prepared = map[types.UID]string{}
	for k, v := range d.prepared {
		prepared[k] = v
	}
	return prepared, slices.Clone(d.calls), slices.Clone(d.unprepared)
}

func simSliceSelector(node, driver string) string {
	return fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", node),
		fields.OneTermEqualSelector("spec.driver", driver)).String()
}

// waitSlice waits until the node's slices of driver list n devices.
func simWaitSlice(t *testing.T, node, driver string, n int) {
	t.Helper()
	c := e2etest.Ctx(t)
	sel := simSliceSelector(node, driver)
	for {
		list, err := srv.Client.ResourceV1().ResourceSlices().List(c, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatalf("list ResourceSlices: %v", err)
		}
		count := 0
		for _, s := range list.Items {
			count += len(s.Spec.Devices)
		}
		if count == n {
			return
		}
		w, err := srv.Client.ResourceV1().ResourceSlices().Watch(c, metav1.ListOptions{FieldSelector: sel,
			ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatalf("watch ResourceSlices: %v", err)
		}
		select {
		case <-w.ResultChan():
		case <-c.Done():
			t.Fatalf("driver %s published no slice with %d devices for node %s: %v", driver, n, node, c.Err())
		}
		w.Stop()
	}
}

func simDeleteSlices(t *testing.T, node, driver string) {
	err := srv.Client.ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: simSliceSelector(node, driver)})
	if err != nil {
		t.Errorf("delete ResourceSlices of %s on %s: %v", driver, node, err)
	}
}

// dranode is a nodesim node with DRA against the test API server.
func simNode(t *testing.T, node string) (root string, n *kubeletsim.Node) {
	t.Helper()
	root, err := os.MkdirTemp("", "ns")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	return root, simStartNode(t, root, node)
}

func simStartNode(t *testing.T, root, node string) *kubeletsim.Node {
	t.Helper()
	n, err := kubeletsim.StartWithOptions(context.Background(), root, simLogger(),
		kubeletsim.Options{DRA: &kubeletsim.DRAOptions{Client: srv.Client, NodeName: node}})
	if err != nil {
		t.Fatalf("start nodesim with DRA: %v", err)
	}
	t.Cleanup(n.Stop)
	t.Cleanup(func() { simDeleteNode(node) })
	return n
}

func simLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func simDeleteNode(node string) {
	_ = srv.Client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
}

// namespace creates a namespace for one test, emptied when the test ends
// (there is no namespace controller to delete it), so that -count=N works.
func simNamespace(t *testing.T, name string) string {
	t.Helper()
	if err := srv.CreateNamespace(e2etest.Ctx(t), name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { simEmptyNamespace(t, name) })
	return name
}

func simEmptyNamespace(t *testing.T, ns string) {
	c := context.Background()
	rc := srv.Client.ResourceV1().ResourceClaims(ns)
	list, err := rc.List(c, metav1.ListOptions{})
	if err != nil {
		t.Errorf("list claims in %s: %v", ns, err)
		return
	}
	for _, cl := range list.Items {
		if len(cl.Finalizers) > 0 { // a failed test may leave the scheduler's finalizer
			cl.Finalizers = nil
			_, _ = rc.Update(c, &cl, metav1.UpdateOptions{})
		}
	}
	all := metav1.ListOptions{}
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	for what, err := range map[string]error{
		"claims":    rc.DeleteCollection(c, zero, all),
		"templates": srv.Client.ResourceV1().ResourceClaimTemplates(ns).DeleteCollection(c, zero, all),
		"pods":      srv.Client.CoreV1().Pods(ns).DeleteCollection(c, zero, all),
	} {
		if err != nil {
			t.Errorf("delete %s in %s: %v", what, ns, err)
		}
	}
}

// deviceClass creates a DeviceClass selecting the devices of driver.
func simDeviceClass(t *testing.T, name, driver string) {
	t.Helper()
	dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", driver)}}}}}
	if _, err := srv.Client.ResourceV1().DeviceClasses().Create(e2etest.Ctx(t), dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create DeviceClass %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = srv.Client.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func simClaimSpec(class string, count int64) resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "net", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}}}}
}

func simTemplate(t *testing.T, ns, name, class string, count int64) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: simClaimSpec(class, count)}}
	if _, err := srv.Client.ResourceV1().ResourceClaimTemplates(ns).Create(e2etest.Ctx(t), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ResourceClaimTemplate %s/%s: %v", ns, name, err)
	}
}

func simClaim(t *testing.T, ns, name, class string) *resourceapi.ResourceClaim {
	t.Helper()
	cl := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: simClaimSpec(class, 1)}
	out, err := srv.Client.ResourceV1().ResourceClaims(ns).Create(e2etest.Ctx(t), cl, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ResourceClaim %s/%s: %v", ns, name, err)
	}
	return out
}

func simGetClaim(t *testing.T, ns, name string) *resourceapi.ResourceClaim {
	t.Helper()
	cl, err := srv.Client.ResourceV1().ResourceClaims(ns).Get(e2etest.Ctx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ResourceClaim %s/%s: %v", ns, name, err)
	}
	return cl
}

// claimsIn lists the namespace's claims.
func simClaimsIn(t *testing.T, ns string) []resourceapi.ResourceClaim {
	t.Helper()
	list, err := srv.Client.ResourceV1().ResourceClaims(ns).List(e2etest.Ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list ResourceClaims in %s: %v", ns, err)
	}
	return list.Items
}

func simGetPod(t *testing.T, ns, name string) (*corev1.Pod, bool) {
	t.Helper()
	p, err := srv.Client.CoreV1().Pods(ns).Get(e2etest.Ctx(t), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("get Pod %s/%s: %v", ns, name, err)
	}
	return p, true
}
