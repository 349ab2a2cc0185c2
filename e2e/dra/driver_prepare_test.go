package dra_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/netdev/dramode"
)

// classLister serves the DeviceClasses from the API server to the allocator.
type classLister struct{ c context.Context }

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	list, err := srv.Client.ResourceV1().DeviceClasses().List(l.c, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []*resourceapi.DeviceClass
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	return srv.Client.ResourceV1().DeviceClasses().Get(l.c, name, metav1.GetOptions{})
}

// createClaim creates a claim with one request per DeviceClass ("reqa", "reqb", ...).
func (n *driverNode) createClaim(name string, classes ...string) *resourceapi.ResourceClaim {
	n.t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	for i, class := range classes {
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: "req" + string(rune('a'+i)), Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}})
	}
	claim, err := srv.Client.ResourceV1().ResourceClaims("default").Create(e2etest.Ctx(n.t), claim, metav1.CreateOptions{})
	e2etest.Must(n.t, err)
	n.t.Cleanup(func() {
		_ = srv.Client.ResourceV1().ResourceClaims("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return claim
}

// setAllocation writes a claim's status.allocation, as kube-scheduler does.
func (n *driverNode) setAllocation(claim *resourceapi.ResourceClaim, a *resourceapi.AllocationResult) *resourceapi.ResourceClaim {
	n.t.Helper()
	claim.Status.Allocation = a
	claim, err := srv.Client.ResourceV1().ResourceClaims("default").UpdateStatus(e2etest.Ctx(n.t), claim, metav1.UpdateOptions{})
	e2etest.Must(n.t, err)
	return claim
}

// allocateClaim creates a claim with one request per DeviceClass and allocates it on the
// node with the scheduler's allocator, as kube-scheduler would.
func (n *driverNode) allocateClaim(name string, classes ...string) *resourceapi.ResourceClaim {
	n.t.Helper()
	c := e2etest.Ctx(n.t)
	claim := n.createClaim(name, classes...)
	list, err := srv.Client.ResourceV1().ResourceSlices().List(c, metav1.ListOptions{})
	e2etest.Must(n.t, err)
	var all []*resourceapi.ResourceSlice
	for i := range list.Items {
		all = append(all, &list.Items[i])
	}
	node, err := srv.Client.CoreV1().Nodes().Get(c, n.name, metav1.GetOptions{})
	e2etest.Must(n.t, err)
	alloc, err := structured.NewAllocator(c, structured.Features{},
		structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()},
		classLister{c}, all, cel.NewCache(10, cel.Features{}))
	e2etest.Must(n.t, err)
	results, err := alloc.Allocate(c, node, []*resourceapi.ResourceClaim{claim})
	e2etest.Must(n.t, err)
	if len(results) != 1 {
		n.t.Fatalf("claim %s: %d allocation results", name, len(results))
	}
	return n.setAllocation(claim, &results[0])
}

func prepareReq(claims ...*resourceapi.ResourceClaim) *drapb.NodePrepareResourcesRequest {
	req := &drapb.NodePrepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	return req
}

func cdiIDs(r *drapb.NodePrepareResourceResponse) []string {
	var out []string
	for _, d := range r.GetDevices() {
		out = append(out, devicesCDI(d.CdiDeviceIds)...)
	}
	slices.Sort(out)
	return out
}

// deviceIDOf is the allocated device's deviceID attribute, from its slice.
func (n *driverNode) deviceIDOf(device string) string {
	n.t.Helper()
	items, err := n.slices(e2etest.Ctx(n.t))
	e2etest.Must(n.t, err)
	for _, s := range items {
		for _, d := range s.Spec.Devices {
			if d.Name == device {
				return strAttr(d, string(dramode.AttrDeviceID))
			}
		}
	}
	n.t.Fatalf("device %s not in the slices", device)
	return ""
}

// TestDriverPreparesClaims: a claim allocated with the shipped DeviceClasses by the
// scheduler's allocator is prepared over the driver's gRPC socket (DRA v1, as the kubelet
// calls it): CDI names <resourceName>=<deviceID>, the devices in CDI specs the CDI library
// loads, their DP device-info files. Prepare is idempotent; a claim naming a device the
// node does not have fails alone. The driver killed and started again keeps the claim
// prepared (same answer, files kept), and unprepare then removes every file, twice over.
func TestDriverPreparesClaims(t *testing.T) {
	n := newDriverNode(t)
	n.start()
	n.waitDevices("six devices", func(m map[string]resourceapi.Device) bool { return len(m) == 6 })
	claim := n.allocateClaim("net-"+n.name, "sriov-vf.example.com", "vhostuser.example.com")
	var wantCDI []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != drvDriver || r.Pool != n.name {
			t.Fatalf("allocation result %+v", r)
		}
		id := n.deviceIDOf(r.Device)
		res := map[string]string{"reqa": drvResVF, "reqb": drvResVhost}[r.Request]
		wantCDI = append(wantCDI, res+"="+id)
	}
	slices.Sort(wantCDI)
	bad := n.setAllocation(n.createClaim("bad-"+n.name, "sriov-vf.example.com"), &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "reqa", Driver: drvDriver, Pool: n.name, Device: "no-such-device"}}}})

	dra := n.draClient()
	resp, err := dra.NodePrepareResources(e2etest.Ctx(t), prepareReq(claim, bad))
	e2etest.Must(t, err)
	got := resp.Claims[string(claim.UID)]
	if got.GetError() != "" || !slices.Equal(cdiIDs(got), wantCDI) {
		t.Fatalf("prepare: error %q, CDI devices %v, want %v", got.GetError(), cdiIDs(got), wantCDI)
	}
	if e := resp.Claims[string(bad.UID)].GetError(); !strings.Contains(e, `device "no-such-device" is not in pool "`+n.name+`"`) {
		t.Errorf("claim with an unknown device: error %q", e)
	}
	n.checkFiles(t, wantCDI, true)

	again, err := dra.NodePrepareResources(e2etest.Ctx(t), prepareReq(claim))
	e2etest.Must(t, err)
	if g := again.Claims[string(claim.UID)]; g.GetError() != "" || !slices.Equal(cdiIDs(g), wantCDI) {
		t.Errorf("prepare again: %q %v", g.GetError(), cdiIDs(g))
	}

	dra = n.restartKeepsPrepared(claim, wantCDI)

	unreq := &drapb.NodeUnprepareResourcesRequest{Claims: prepareReq(claim, bad).Claims}
	for range 2 {
		un, err := dra.NodeUnprepareResources(e2etest.Ctx(t), unreq)
		e2etest.Must(t, err)
		for uid, r := range un.Claims {
			if r.GetError() != "" {
				t.Errorf("unprepare %s: %s", uid, r.GetError())
			}
		}
	}
	n.checkFiles(t, wantCDI, false)
	if left := filesUnder(t, filepath.Join(n.plugins, drvDriver, "claims")); len(left) != 0 {
		t.Errorf("checkpoints left: %v", left)
	}
}

// restartKeepsPrepared kills the driver and starts it again, then stops it with SIGTERM
// and starts it again: each time the prepared claim and its files stay, and the new run
// answers prepare the same. It returns the last run's DRA client.
func (n *driverNode) restartKeepsPrepared(claim *resourceapi.ResourceClaim, wantCDI []string) drapb.DRAPluginClient {
	t := n.t
	t.Helper()
	// A killed driver leaves the claim prepared; the next run takes it over.
	n.proc.Kill()
	n.checkFiles(t, wantCDI, true)
	n.start()
	after, err := n.draClient().NodePrepareResources(e2etest.Ctx(t), prepareReq(claim))
	e2etest.Must(t, err)
	if g := after.Claims[string(claim.UID)]; g.GetError() != "" || !slices.Equal(cdiIDs(g), wantCDI) {
		t.Errorf("prepare after restart: %q %v", g.GetError(), cdiIDs(g))
	}
	n.checkFiles(t, wantCDI, true)

	// Stopped with SIGTERM (a DaemonSet update), it exits 0 and leaves them as well.
	n.proc.Terminate(30 * time.Second)
	if exited, err := n.proc.Exited(); !exited || err != nil {
		t.Errorf("netdev-dp on SIGTERM: exited %v, %v", exited, err)
	}
	n.checkFiles(t, wantCDI, true)
	n.start()
	return n.draClient()
}

// checkFiles checks the CDI devices and DP files of a prepared claim, or that none is left.
// The CDI name is "<resourceName>=<device ID>" (the IDs here are valid CDI names).
func (n *driverNode) checkFiles(t *testing.T, cdiNames []string, prepared bool) {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(n.cdiDir), cdiapi.WithAutoRefresh(false))
	e2etest.Must(t, err)
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("CDI spec errors: %v", errs)
	}
	listed, cdiNames := devicesCDI(cache.ListDevices()), devicesCDI(cdiNames)
	slices.Sort(listed)
	if want := map[bool][]string{true: cdiNames, false: nil}[prepared]; !slices.Equal(listed, want) {
		t.Errorf("CDI devices %v, want %v", listed, want)
	}
	store := devinfo.NewStore(n.devinfoDir)
	for _, name := range cdiNames {
		res, id, _ := strings.Cut(name, "=")
		info, err := store.ReadDP(res, id)
		switch {
		case prepared && (err != nil || devinfo.Validate(info) != nil):
			t.Errorf("DP file of %s %s: %v", res, id, err)
		case !prepared && err == nil:
			t.Errorf("DP file of %s %s left after unprepare", res, id)
		}
	}
	if !prepared {
		if left := filesUnder(t, n.cdiDir); len(left) != 0 {
			t.Errorf("CDI specs left: %v", left)
		}
		if left := filesUnder(t, filepath.Join(n.devinfoDir, "dp")); len(left) != 0 {
			t.Errorf("device-info files left: %v", left)
		}
	}
}

func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
