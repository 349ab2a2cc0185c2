package dra_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/testenv"
)

const (
	shareRes   = "example.com/shared"
	shareClass = "shared.example.com"
)

// shareNode is a driver node whose veth end is shareable: 1 Gbit/s in
// 100M steps, at most two shares; and the DeviceClass of that resource.
func shareNode(t *testing.T) (n *driverNode, parent string) {
	parent = testenv.VethPair(t, "shr") + "a"
	n = newDriverNode(t, resources.Resource{ResourceName: shareRes, NetDevs: &link.Config{Names: []string{parent}},
		Share: &netshare.Config{Interfaces: 2, Bandwidth: netshare.Bandwidth{Total: "1G", Default: "100M", Step: "100M"}}})
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: shareClass}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.attributes["k8s.cni.cncf.io"].resourceName == "` + shareRes + `"`}}}}}
	_, err := srv.Client.ResourceV1().DeviceClasses().Create(e2etest.Ctx(t), class, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() {
		_ = srv.Client.ResourceV1().DeviceClasses().Delete(context.Background(), shareClass, metav1.DeleteOptions{})
	})
	return n, parent
}

// shareClaim creates a claim with one request of the shared class asking
// for bandwidth ("" asks for none: the device's default).
func (n *driverNode) shareClaim(name, bandwidth string) *resourceapi.ResourceClaim {
	n.t.Helper()
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: shareClass}
	if bandwidth != "" {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			netshare.CapBandwidth: resource.MustParse(bandwidth)}}
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "share", Exactly: req}}}}}
	claim, err := srv.Client.ResourceV1().ResourceClaims("default").Create(e2etest.Ctx(n.t), claim, metav1.CreateOptions{})
	e2etest.Must(n.t, err)
	n.t.Cleanup(func() {
		_ = srv.Client.ResourceV1().ResourceClaims("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return claim
}

// allocateShares runs kube-scheduler's DRA allocator with consumable capacity on, as it
// is by default since 1.36 (allocateWith).
func (n *driverNode) allocateShares(claim *resourceapi.ResourceClaim, before ...*resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	n.t.Helper()
	return n.allocateWith(structured.Features{ConsumableCapacity: true}, claim, before...)
}

// allocateWith runs the allocator with the features on over the node's slices, with
// what the claims allocated before hold (a shared device's shares and consumed
// capacity, a whole device), as kube-scheduler gathers it: nil when it finds no fit.
func (n *driverNode) allocateWith(features structured.Features, claim *resourceapi.ResourceClaim, before ...*resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	n.t.Helper()
	c := e2etest.Ctx(n.t)
	list, err := srv.Client.ResourceV1().ResourceSlices().List(c, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.name})
	e2etest.Must(n.t, err)
	var all []*resourceapi.ResourceSlice
	for i := range list.Items {
		all = append(all, &list.Items[i])
	}
	state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	for _, b := range before {
		for _, r := range b.Status.Allocation.Devices.Results {
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID == nil {
				state.AllocatedDevices.Insert(id)
				continue
			}
			state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
	node, err := srv.Client.CoreV1().Nodes().Get(c, n.name, metav1.GetOptions{})
	e2etest.Must(n.t, err)
	alloc, err := structured.NewAllocator(c, features, state, classLister{c}, all, cel.NewCache(10, cel.Features{}))
	e2etest.Must(n.t, err)
	results, err := alloc.Allocate(c, node, []*resourceapi.ResourceClaim{claim})
	if err != nil || len(results) == 0 {
		n.t.Logf("claim %s not allocated: %v", claim.Name, err)
		return nil
	}
	return n.setAllocation(claim, &results[0])
}

// needSharing skips the test on an API server older than 1.36: on 1.35 the
// DRAConsumableCapacity and DRAPartitionableDevices gates are alpha and off, and the
// API server drops what shares and counters need (a device's allowMultipleAllocations,
// the pool's shared counters).
func needSharing(t *testing.T) {
	t.Helper()
	if !serverAtLeast(t, 1, 36) {
		t.Skip("DRA consumable capacity and partitionable devices are off before Kubernetes 1.36 (alpha gates)")
	}
}

// TestDriverSharesDevices: a shareable device is published once with its capacities; the
// scheduler's allocator gives two claims shares of it (each its own share ID, its
// bandwidth rounded up to the step) and refuses a third past its interfaces and one past
// its bandwidth; prepare gives each share its own CDI device naming the parent, the share
// and the bandwidth, and unprepare of one leaves the other's.
func TestDriverSharesDevices(t *testing.T) {
	needSharing(t)
	n, parent := shareNode(t)
	n.start()
	devs := n.waitDevices("the shareable device", func(m map[string]resourceapi.Device) bool {
		d, ok := m[parent]
		return ok && d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations
	})
	if bw := devs[parent].Capacity[netshare.CapBandwidth]; bw.Value.String() != "1G" {
		t.Fatalf("bandwidth capacity %+v", bw)
	}
	a := n.allocateShares(n.shareClaim("share-a-"+n.name, "300M"))
	b := n.allocateShares(n.shareClaim("share-b-"+n.name, "550M"), a)
	if a == nil || b == nil {
		t.Fatal("two shares that fit were not allocated")
	}
	ra, rb := a.Status.Allocation.Devices.Results[0], b.Status.Allocation.Devices.Results[0]
	if ra.Device != parent || rb.Device != parent || ra.ShareID == nil || rb.ShareID == nil || *ra.ShareID == *rb.ShareID {
		t.Fatalf("allocations %+v and %+v, want two shares of %s", ra, rb, parent)
	}
	if got := rb.ConsumedCapacity[netshare.CapBandwidth]; got.String() != "600M" {
		t.Errorf("550M asked: consumed %s, want it rounded up to the 100M step", got.String())
	}
	// 100M is left, but both interfaces are taken; 2G is more than a share may have.
	if c := n.allocateShares(n.shareClaim("share-c-"+n.name, "100M"), a, b); c != nil {
		t.Errorf("a third share past the device's interfaces was allocated: %+v", c.Status.Allocation)
	}
	if d := n.allocateShares(n.shareClaim("share-d-"+n.name, "2G"), a); d != nil {
		t.Errorf("a share past the device's bandwidth was allocated: %+v", d.Status.Allocation)
	}
	n.prepareShares(t, parent, a, b)
}

// prepareShares prepares a and b, checks their CDI devices, and unprepares
// a: b's CDI device stays.
func (n *driverNode) prepareShares(t *testing.T, parent string, a, b *resourceapi.ResourceClaim) {
	dra := n.draClient()
	resp, err := dra.NodePrepareResources(e2etest.Ctx(t), prepareReq(a, b))
	e2etest.Must(t, err)
	var ids []string
	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		r := c.Status.Allocation.Devices.Results[0]
		id := netshare.DeviceID(parent, string(*r.ShareID))
		ids = append(ids, id)
		got := resp.Claims[string(c.UID)]
		if got.GetError() != "" || !slices.Equal(cdiIDs(got), []string{shareRes + "=" + cdispec.DeviceName(id)}) {
			t.Fatalf("prepare %s: error %q, CDI devices %v", c.Name, got.GetError(), cdiIDs(got))
		}
		env := n.cdiEnv(t, shareRes+"="+cdispec.DeviceName(id))
		prefix := cdispec.EnvName(shareRes, id)
		bw, err := netshare.Rate(r.ConsumedCapacity[netshare.CapBandwidth])
		e2etest.Must(t, err)
		for _, want := range []string{prefix + "_PARENT=" + parent, prefix + "_SHARE_ID=" + string(*r.ShareID),
			prefix + "_BANDWIDTH=" + strconv.FormatInt(bw, 10)} {
			if !slices.Contains(env, want) {
				t.Errorf("claim %s: CDI env %v lacks %s", c.Name, env, want)
			}
		}
	}
	un, err := dra.NodeUnprepareResources(e2etest.Ctx(t), &drapb.NodeUnprepareResourcesRequest{Claims: prepareReq(a).Claims})
	e2etest.Must(t, err)
	if e := un.Claims[string(a.UID)].GetError(); e != "" {
		t.Fatalf("unprepare a: %s", e)
	}
	if env := n.cdiEnv(t, shareRes+"="+cdispec.DeviceName(ids[1])); len(env) == 0 {
		t.Error("unprepare of a removed b's CDI device")
	}
	if n.cdiCache(t).GetDevice(shareRes+"="+cdispec.DeviceName(ids[0])) != nil {
		t.Error("a's CDI device is still there after unprepare")
	}
	_, err = dra.NodeUnprepareResources(e2etest.Ctx(t), &drapb.NodeUnprepareResourcesRequest{Claims: prepareReq(b).Claims})
	e2etest.Must(t, err)
}

func (n *driverNode) cdiCache(t *testing.T) *cdiapi.Cache {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(n.cdiDir), cdiapi.WithAutoRefresh(false))
	e2etest.Must(t, err)
	return cache
}

// cdiEnv is the environment of a CDI device in the node's CDI dir.
func (n *driverNode) cdiEnv(t *testing.T, name string) []string {
	d := n.cdiCache(t).GetDevice(name)
	if d == nil {
		t.Fatalf("no CDI device %s", name)
	}
	return d.ContainerEdits.Env
}

// TestDriverVFsShareTheirPFsBandwidth: with pfBandwidth, the PF's bandwidth (10G) is a
// shared counter in the node's pool and each VF consumes 4G of it; kube-scheduler's
// allocator (partitionable devices on, as by default since 1.36) gives two claims a VF
// each and refuses a third, though two VFs are free: the PF has 2G left.
func TestDriverVFsShareTheirPFsBandwidth(t *testing.T) {
	needSharing(t)
	n := newDriverNode(t)
	var cfg resources.Config
	raw, err := os.ReadFile(n.config)
	e2etest.Must(t, err)
	e2etest.Must(t, json.Unmarshal(raw, &cfg))
	cfg.Resources[0].PFBandwidth = &netshare.PFBandwidth{Total: "10G", PerVF: "4G"}
	raw, err = json.Marshal(cfg)
	e2etest.Must(t, err)
	e2etest.Must(t, os.WriteFile(n.config, raw, 0o644))
	n.start()
	n.waitDevices("four VFs consuming counters", func(m map[string]resourceapi.Device) bool {
		count := 0
		for _, d := range m {
			if len(d.ConsumesCounters) == 1 {
				count++
			}
		}
		return count == 4
	})
	var held []*resourceapi.ResourceClaim
	for i := range 3 {
		claim := n.createClaim(fmt.Sprintf("vf-%d-%s", i, n.name), "sriov-vf.example.com")
		got := n.allocateWith(structured.Features{PartitionableDevices: true}, claim, held...)
		switch {
		case i < 2 && got == nil:
			t.Fatalf("claim %d: not allocated, though its PF has the bandwidth", i)
		case i == 2 && got != nil:
			t.Fatalf("claim 2 was allocated %+v: past its PF's bandwidth", got.Status.Allocation.Devices.Results)
		}
		held = append(held, got)
	}
}
