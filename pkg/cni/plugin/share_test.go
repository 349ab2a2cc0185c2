package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/cni/dradevice"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/cni/shape"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// A share found by the local path (the kubelet reports its CDI device, with
// resourceName alone) has no claim to read its bandwidth from: ADD fails
// naming the fix, and takes nothing.
func TestShareNeedsItsClaim(t *testing.T) {
	id := netshare.DeviceID("ens1f0", "5c0f0c4e-0000-4000-8000-000000000001")
	k, _ := draEnv(t, "example.com/vf="+id)
	err := k.p.Add(k.args())
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrNoDevice || !strings.Contains(te.Msg, "device "+id+" is a share of a shared device") ||
		!strings.Contains(te.Msg, `"resourceClaim"`) {
		t.Fatalf("ADD: %v", err)
	}
	if recs := k.records(); len(recs) != 0 {
		t.Errorf("state after a failed ADD: %+v", recs)
	}
}

// shareKube is the API server as the scheduler leaves it for pod default/p1
// on node1 holding a share of dev-0 (the host link parent) at bandwidth:
// the pod, its claim "net" allocated with a share ID and the bandwidth it
// consumed, the driver's slice. It records devplumb's claim status writes.
type shareKube struct {
	*fakeKube
	pod      *corev1.Pod
	claim    *resourceapi.ResourceClaim
	slice    resourceapi.ResourceSlice
	mu       sync.Mutex
	statuses []dradevice.Status
	removed  []dradevice.Claim
}

const shareDriver = "netdev.devplumb.io"

func newShareKube(parent, shareID, bandwidth string) *shareKube {
	sid := k8stypes.UID(shareID)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p1", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "node1", ResourceClaims: []corev1.PodResourceClaim{{Name: "net", ResourceClaimName: ptr.To("p1-net")}}}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p1-net"},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "net", Driver: shareDriver, Pool: "node1", Device: "dev-0", ShareID: &sid,
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{netshare.CapBandwidth: resource.MustParse(bandwidth)}}}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p1", UID: "u1"}}}}
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	slice := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: shareDriver, NodeName: ptr.To("node1"),
		Pool: resourceapi.ResourcePool{Name: "node1", Generation: 1, ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "dev-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			dradevice.AttrDeviceID: str(parent), dradevice.AttrResourceName: str("example.com/shared")}}}}}
	return &shareKube{fakeKube: &fakeKube{}, pod: pod, claim: claim, slice: slice}
}

func (s *shareKube) Pod(_ context.Context, namespace, name, _ string) (*corev1.Pod, error) {
	if namespace != s.pod.Namespace || name != s.pod.Name {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return s.pod.DeepCopy(), nil
}

func (s *shareKube) ResourceClaim(_ context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	if namespace != s.claim.Namespace || name != s.claim.Name {
		return nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), name)
	}
	return s.claim.DeepCopy(), nil
}

func (s *shareKube) ResourceSlices(_ context.Context, node, driver string) ([]resourceapi.ResourceSlice, error) {
	if node != "node1" || driver != shareDriver {
		return nil, nil
	}
	return []resourceapi.ResourceSlice{*s.slice.DeepCopy()}, nil
}

func (s *shareKube) IsNotFound(err error) bool { return apierrors.IsNotFound(err) }

func (s *shareKube) ApplyDeviceStatus(_ context.Context, st dradevice.Status) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statuses = append(s.statuses, st)
	return nil
}

func (s *shareKube) RemoveDeviceStatus(_ context.Context, c dradevice.Claim) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed = append(s.removed, c)
	return nil
}

// shareEnv is a plugin whose pod holds a share of a host veth at bandwidth,
// attached by the real macvlan plugin into a real netns.
func shareEnv(t *testing.T, bandwidth string) (*kubeEnv, *shareKube, *skel.CmdArgs, ns.NetNS) {
	k := newKubeEnv(t)
	parent := testenv.VethPair(t, "shr") + "a"
	sk := newShareKube(parent, "5c0f0c4e-0000-4000-8000-000000000001", bandwidth)
	k.p.NewKube = func(string, time.Duration, *slog.Logger) (Kube, error) { return sk, nil }
	k.conf["resourceClaim"] = "net"
	k.conf["delegate"] = map[string]any{"type": "macvlan", "mode": "bridge",
		"ipam": map[string]any{"type": "static", "addresses": []any{map[string]any{"address": "192.0.2.10/24"}}}}
	pod := testenv.NetNS(t)
	args := k.args()
	args.Netns, args.Path, args.StdinData = pod.Path(), testenv.CNIPlugins(t), nodeconfigtest.SplitEnv(t, k.conf)
	return k, sk, args, pod
}

// ADD of a share through the real plugin path (the claim from the API
// server, the real macvlan plugin) shapes the macvlan to the share's
// bandwidth each way, read back from the kernel; DEL takes the macvlan
// and the share's ifb, and the claim's status entry.
func TestShareShapedToItsBandwidth(t *testing.T) {
	k, sk, args, pod := shareEnv(t, "300M")
	if err := k.p.Add(args); err != nil {
		t.Fatal(err)
	}
	shaped, err := shape.Read(pod.Path(), "net1")
	if err != nil || shaped.Send != 300*netshare.Mbit || shaped.Receive != 300*netshare.Mbit {
		t.Fatalf("net1 shaped %+v (%v), want 300M each way", shaped, err)
	}
	if len(sk.statuses) != 1 || sk.statuses[0].Claim.ShareID == "" || sk.statuses[0].InterfaceName != "net1" {
		t.Errorf("claim status writes %+v, want the share's entry with net1", sk.statuses)
	}
	checkShaping(t, k, args, pod)
	if err := k.p.Del(args); err != nil {
		t.Fatal(err)
	}
	if testenv.HasLink(t, pod, "net1") || testenv.HasLink(t, pod, shape.IfbName("net1")) || len(k.records()) != 0 || len(sk.removed) != 1 {
		t.Errorf("after DEL: net1 %v, ifb %v, records %d, claim status removals %+v", testenv.HasLink(t, pod, "net1"),
			testenv.HasLink(t, pod, shape.IfbName("net1")), len(k.records()), sk.removed)
	}
}

// A share the kernel refuses to shape (the pod's netns holds a link by the
// ifb's name) fails ADD with ErrShape naming the claim's share, its rate
// and the interface, after the delegate ran: the macvlan is removed, the
// device freed, no status written; the pod's own link stays.
func TestShareShapingFails(t *testing.T) {
	k, sk, args, pod := shareEnv(t, "300M")
	if err := pod.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: shape.IfbName("net1")}, PeerName: "peer0"})
	}); err != nil {
		t.Fatal(err)
	}
	err := k.p.Add(args)
	var te *types.Error
	want := "share 5c0f0c4e-0000-4000-8000-000000000001: bandwidth 300000000 bit/s cannot be enforced on net1"
	if !errors.As(err, &te) || te.Code != ErrShape || !strings.Contains(te.Msg, want) {
		t.Fatalf("ADD: %v, want code %d with %q", err, ErrShape, want)
	}
	if testenv.HasLink(t, pod, "net1") || !testenv.HasLink(t, pod, shape.IfbName("net1")) || len(k.records()) != 0 ||
		len(sk.statuses) != 0 || len(sk.set) != 0 {
		t.Errorf("after the failed ADD: net1 %v, the pod's link %v, records %d, claim status %+v, network-status %+v",
			testenv.HasLink(t, pod, "net1"), testenv.HasLink(t, pod, shape.IfbName("net1")), len(k.records()), sk.statuses, sk.set)
	}
}

// checkShaping: CHECK passes on the shaped share and fails, with ErrShape
// naming the share, once its send tbf is gone.
func checkShaping(t *testing.T, k *kubeEnv, args *skel.CmdArgs, pod ns.NetNS) {
	t.Helper()
	k.conf["prevResult"] = json.RawMessage(`{"cniVersion":"1.0.0","interfaces":[{"name":"net1","sandbox":"` + pod.Path() + `"}],` +
		`"ips":[{"address":"192.0.2.10/24","interface":0}]}`)
	check := *args
	check.StdinData = nodeconfigtest.SplitEnv(t, k.conf)
	if err := k.p.Check(&check); err != nil {
		t.Fatalf("CHECK of the shaped share: %v", err)
	}
	if err := pod.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("net1")
		if err == nil {
			err = netlink.QdiscDel(&netlink.Tbf{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}})
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	err := k.p.Check(&check)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrShape || !strings.Contains(te.Msg, "share 5c0f0c4e-0000-4000-8000-000000000001: net1 is not shaped") {
		t.Errorf("CHECK without the send tbf: %v, want code %d naming the share", err, ErrShape)
	}
}
