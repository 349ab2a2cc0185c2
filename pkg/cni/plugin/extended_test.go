package plugin

import (
	"fmt"
	"testing"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

const extHostdev = "example.com/hostdev"

// extendedEnv is a node whose pod p1 asked resources.limits
// {example.com/hostdev: 2} served by netdev-dp as a DRA driver: the kubelet
// reports the claim the scheduler made under dynamic_resources only, with
// its two devices as kubelets 1.34-1.37 list them (the second with the
// first's CDI device before its own).
func extendedEnv(t *testing.T) *kubeEnv {
	k, pr := draEnv(t)
	pr.SetPod(&v1.PodResources{Namespace: "default", Name: "p1", Containers: []*v1.ContainerResources{{
		Name: "app", DynamicResources: []*v1.DynamicResource{podresourcestest.Claim("default", "p1-extended-resources-x7k2p",
			podresourcestest.Device("netdev.devplumb.io", "node1", "ens2f0", extHostdev+"=ens2f0"),
			podresourcestest.Device("netdev.devplumb.io", "node1", "ens2f1", extHostdev+"=ens2f0", extHostdev+"=ens2f1"))},
	}}})
	k.conf["resourceName"] = extHostdev
	store := devinfo.NewStore(k.conf["deviceInfoDir"].(string))
	for i, id := range []string{"ens2f0", "ens2f1"} {
		info := &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version, Pci: &devinfo.PciDevice{PciAddress: fmt.Sprintf("0000:02:00.%d", i)}}
		if err := store.WriteDP(extHostdev, id, info); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

// Two attachments of the same network (net1, net2) of a pod whose
// extended resource a DRA driver serves take its two devices, one each,
// from the kubelet alone (no kubeconfig), and each record notes its device
// of the scheduler's claim, for the claim status; DEL of both leaves nothing.
func TestExtendedResourceTwoAttachments(t *testing.T) {
	k := extendedEnv(t)
	got := map[string]string{}
	for _, ifName := range []string{"net1", "net2"} {
		args := k.args()
		args.IfName = ifName
		if err := k.p.Add(args); err != nil {
			t.Fatalf("ADD %s: %v", ifName, err)
		}
	}
	for _, r := range k.records() {
		if r.Claim == nil || r.Claim.Name != "p1-extended-resources-x7k2p" || r.Claim.Device != r.DeviceID || r.ResourceName != extHostdev {
			t.Errorf("record %s: device %s of %s, claim %+v", r.IfName, r.DeviceID, r.ResourceName, r.Claim)
		}
		got[r.IfName] = r.DeviceID
	}
	if got["net1"] == got["net2"] || len(got) != 2 {
		t.Fatalf("attachments' devices %v, want ens2f0 and ens2f1 one each", got)
	}
	for _, ifName := range []string{"net1", "net2"} {
		args := k.args()
		args.IfName = ifName
		if err := k.p.Del(args); err != nil {
			t.Fatalf("DEL %s: %v", ifName, err)
		}
	}
	if recs := k.records(); len(recs) != 0 {
		t.Errorf("state after DEL: %+v", recs)
	}
}

// A device of the scheduler's claim that Multus injects (Multus 4.3.1 maps
// extended resources through the pod's extendedResourceClaimStatus) is the
// pod's by the kubelet's report, the second device included, whose CDI
// device the kubelet lists after the first's; a device of no claim of the
// pod is refused.
func TestExtendedResourceInjectedDeviceIsChecked(t *testing.T) {
	k := extendedEnv(t)
	k.conf["runtimeConfig"] = map[string]any{"deviceID": "ens2f7"}
	wantCode(t, "ADD of a device the pod was not given", k.p.Add(k.args()), ErrNoDevice)
	k.conf["runtimeConfig"] = map[string]any{"deviceID": "ens2f1"}
	if err := k.p.Add(k.args()); err != nil {
		t.Fatalf("ADD of the pod's second device: %v", err)
	}
}
