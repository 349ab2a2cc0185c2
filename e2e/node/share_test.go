package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/testenv"
)

const (
	shareResource = "example.com/shared-nic"
	shareClass    = "shared-nic.example.com"
)

// shareConflist is devplumb alone in the node's conflist, attaching the share of the
// pod's claim "net" as eth0: a macvlan of the shared device.
var shareConflist = []byte(`{"cniVersion": "1.0.0", "name": "devplumb-share", "plugins": [{
  "type": "devplumb", "resourceClaim": "net",
  "delegate": {"type": "macvlan", "mode": "bridge", "ipam": {"type": "host-local", "ranges": [[{"subnet": "192.0.2.64/26"}]]}}}]}`)

// shareDevice adds to the DRA driver's config a shareable resource of parent (1G in 100M
// steps, at most 3 shares), restarts the driver and waits for the device in its slice;
// and creates the resource's DeviceClass.
func shareDevice(t *testing.T, parent string) {
	t.Helper()
	cms := nd.Client.CoreV1().ConfigMaps("kube-system")
	cm, err := cms.Get(ctx(t), draDS, metav1.GetOptions{})
	e2etest.Must(t, err)
	var cfg resources.Config
	e2etest.Must(t, json.Unmarshal([]byte(cm.Data["config.json"]), &cfg))
	cfg.Resources = append(cfg.Resources, resources.Resource{ResourceName: shareResource, NetDevs: &link.Config{Names: []string{parent}},
		Share: &netshare.Config{Interfaces: 3, Bandwidth: netshare.Bandwidth{Total: "1G", Default: "100M", Step: "100M"}}})
	raw, err := json.Marshal(cfg)
	e2etest.Must(t, err)
	cm.Data["config.json"] = string(raw)
	_, err = cms.Update(ctx(t), cm, metav1.UpdateOptions{})
	e2etest.Must(t, err)
	e2etest.Must(t, nd.Client.CoreV1().Pods("kube-system").DeleteCollection(ctx(t), metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + draDS}))
	waitFor(t, "the shareable device "+parent+" in the driver's slice", func(c context.Context) error {
		d, err := sliceDeviceByID(c, parent)
		if err != nil {
			return err
		}
		if d.attrs == nil {
			return fmt.Errorf("no attributes")
		}
		return nil
	})
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: shareClass}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.attributes["k8s.cni.cncf.io"].resourceName == "` + shareResource + `"`}}}}}
	_, err = nd.Client.ResourceV1().DeviceClasses().Create(ctx(t), class, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() {
		_ = nd.Client.ResourceV1().DeviceClasses().Delete(context.Background(), shareClass, metav1.DeleteOptions{})
	})
}

// shareTemplate is a claim template asking for a share of bandwidth.
func shareTemplate(t *testing.T, name, bandwidth string) string {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "share", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: shareClass,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					netshare.CapBandwidth: resource.MustParse(bandwidth)}}}}}}}}}
	tc := nd.Client.ResourceV1().ResourceClaimTemplates("default")
	_, err := tc.Create(ctx(t), tmpl, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { _ = tc.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// shareEntry checks that the pod's claim holds a share of parent whose status entry
// (devplumb's, keyed by the share ID) names eth0, and returns the share ID.
func shareEntry(t *testing.T, pod *corev1.Pod, parent string) string {
	t.Helper()
	d := allocated(t, pod, shareResource)
	r := d.claim.Status.Allocation.Devices.Results[0]
	if d.id != parent || r.ShareID == nil {
		t.Fatalf("pod %s: claim holds %s share %v, want a share of %s", pod.Name, d.id, r.ShareID, parent)
	}
	var entry *resourceapi.AllocatedDeviceStatus
	waitFor(t, "pod "+pod.Name+"'s claim status entry", func(c context.Context) error {
		cl, err := nd.Client.ResourceV1().ResourceClaims("default").Get(c, d.claim.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i, s := range cl.Status.Devices {
			if s.ShareID != nil && *s.ShareID == string(*r.ShareID) && s.NetworkData != nil {
				entry = &cl.Status.Devices[i]
				return nil
			}
		}
		return fmt.Errorf("status.devices %+v", cl.Status.Devices)
	})
	if entry.NetworkData.InterfaceName != "eth0" {
		t.Errorf("pod %s: status entry %+v, want eth0", pod.Name, entry.NetworkData)
	}
	return string(*r.ShareID)
}

// TestDRASharesOnTheRealNode (issue 35, on the real node): netdev-dp publishes a veth
// as shareable (1G, at most 3 shares); the real scheduler gives two pods shares of it by
// bandwidth (300M, then 600M) and keeps a third asking 200M pending (100M left); devplumb
// gives each running pod a macvlan of the device as eth0 and its claim's status entry
// under its share ID. Deleting the first pod returns its 300M: the third pod then runs,
// and the second's share is untouched.
func TestDRASharesOnTheRealNode(t *testing.T) {
	needKube136(t, "DRA consumable capacity")
	draMode(t)
	parent := testenv.VethPair(t, "shr") + "a"
	shareDevice(t, parent)
	useConflist(t, "devplumb-share", shareConflist)
	a := createClaimPod(t, "share-a", shareTemplate(t, "share-300m", "300M"), true, nil)
	// share-b only once share-a runs: kube-scheduler (1.36 to 1.38) counts a share twice
	// while its claim is written and its binding not yet done (GatherAllocatedState adds
	// the in-flight claim's capacity to what its informer already added), so a pod
	// scheduled in that moment sees 600M taken, is unschedulable, and nothing requeues it
	// for up to 5 minutes (docs/sharing.md).
	waitRunning(t, a)
	b := createClaimPod(t, "share-b", shareTemplate(t, "share-600m", "600M"), true, nil)
	waitRunning(t, b)
	shareA, shareB := shareEntry(t, a, parent), shareEntry(t, b, parent)
	if shareA == shareB {
		t.Fatalf("both pods got share %s", shareA)
	}
	c := createClaimPod(t, "share-c", shareTemplate(t, "share-200m", "200M"), true, nil)
	waitUnschedulable(t, c)
	deletePod(t, a)
	waitRunning(t, c)
	shareEntry(t, c, parent)
	if got := shareEntry(t, b, parent); got != shareB {
		t.Errorf("pod share-b's share changed from %s to %s", shareB, got)
	}
}
