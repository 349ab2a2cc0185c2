package dra_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/cni/shape"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// sharePod makes a pod whose claim "net" holds a share of dev-0 as the scheduler
// allocates one of a shareable device: its share ID and the bandwidth it consumed.
func (n *cniNode) sharePod(shareID, bandwidth string) (*corev1.Pod, string) {
	n.t.Helper()
	claimName := "claim-" + cniRandom()
	pod := n.pod("pod-"+cniRandom(), claimName, false)
	claim := n.claim(claimName, nil, nil)
	id := types.UID(shareID)
	claim.Status.Allocation = &resourcev1.AllocationResult{NodeSelector: nodeSelector(n.name),
		Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			Request: "net", Driver: n.driver, Pool: n.name, Device: "dev-0", ShareID: &id,
			ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{netshare.CapBandwidth: resource.MustParse(bandwidth)}}}}}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	_, err := srv.Client.ResourceV1().ResourceClaims(cniNS).UpdateStatus(e2etest.Ctx(n.t), claim, metav1.UpdateOptions{})
	e2etest.Must(n.t, err)
	return pod, claimName
}

// shareConf is a NAD config for shares: macvlan, the pod's claim "net".
func (n *cniNode) shareConf(ip string) map[string]any {
	return n.conf(map[string]any{"resourceClaim": "net", "delegate": map[string]any{"type": "macvlan", "mode": "bridge",
		"ipam": map[string]any{"type": "static", "addresses": []any{map[string]any{"address": ip}}}}})
}

// macvlanOf is the parent index of the macvlan ifName in netns; 0 if there is none.
func macvlanOf(t *testing.T, netns, ifName string) int {
	t.Helper()
	parent := 0
	e2etest.Must(t, ns.WithNetNSPath(netns, func(ns.NetNS) error {
		l, err := netlink.LinkByName(ifName)
		if err == nil && l.Type() == "macvlan" {
			parent = l.Attrs().ParentIndex
		}
		return nil
	}))
	return parent
}

// ifbIn says whether the netns holds an ifb link.
func ifbIn(t *testing.T, netns string) bool {
	t.Helper()
	found := false
	e2etest.Must(t, ns.WithNetNSPath(netns, func(ns.NetNS) error {
		links, err := netlink.LinkList()
		for _, l := range links {
			found = found || l.Type() == "ifb"
		}
		return err
	}))
	return found
}

// TestCNISharesOfOneDevice: two pods hold shares of one device (their claims allocated
// as the scheduler allocates a shareable device). devplumb gives each a macvlan of the
// parent, which stays on the host, shaped to its share's bandwidth each way (read back
// from the kernel: a tbf on the macvlan, its ingress redirected to an ifb with a tbf);
// each pod's network-status and its claim's status entry
// (keyed by its share ID) name its interface; DEL of one removes that share alone.
func TestCNISharesOfOneDevice(t *testing.T) {
	needSharing(t)
	n := newCNINode(t)
	parent := n.veth()
	n.slice(cniDev{"dev-0", attrs(parent, cniResource)})
	shares := []string{"5c0f0c4e-0000-4000-8000-000000000001", "5c0f0c4e-0000-4000-8000-000000000002"}
	var pods []*corev1.Pod
	var claims, netnss []string
	for i, sid := range shares {
		pod, claim := n.sharePod(sid, []string{"300M", "600M"}[i])
		pods, claims, netnss = append(pods, pod), append(claims, claim), append(netnss, testenv.NetNS(t).Path())
		if res := n.run("ADD", n.shareConf("192.0.2.1"+string(rune('0'+i))+"/24"), netnss[i], pod, "net1"); res.Code != 0 {
			t.Fatalf("ADD of share %d: %+v", i, res)
		}
	}
	host, err := netlink.LinkByName(parent)
	e2etest.Must(t, err)
	for i, rate := range []uint64{300 * netshare.Mbit, 600 * netshare.Mbit} {
		shaped, err := shape.Read(netnss[i], "net1")
		if err != nil || shaped.Send != rate || shaped.Receive != rate {
			t.Fatalf("pod %d: net1 shaped %+v (%v), want %d bit/s each way", i, shaped, err, rate)
		}
	}
	for i, sid := range shares {
		if got := macvlanOf(t, netnss[i], "net1"); got != host.Attrs().Index {
			t.Fatalf("pod %d: net1 is no macvlan of %s (parent index %d, want %d)", i, parent, got, host.Attrs().Index)
		}
		st := deviceStatus(t, claims[i], n.driver, "dev-0")
		if st == nil || st.ShareID == nil || *st.ShareID != sid || st.NetworkData == nil || st.NetworkData.InterfaceName != "net1" {
			t.Fatalf("claim %d status entry %+v: want share %s with net1", i, st, sid)
		}
		if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pods[i].Name); len(ns) != 1 || ns[0].Interface != "net1" {
			t.Fatalf("pod %d network-status %+v", i, ns)
		}
	}
	if res := n.run("DEL", n.shareConf("192.0.2.10/24"), netnss[0], pods[0], "net1"); res.Code != 0 {
		t.Fatalf("DEL of share 0: %+v", res)
	}
	if macvlanOf(t, netnss[0], "net1") != 0 || macvlanOf(t, netnss[1], "net1") != host.Attrs().Index || !onHost(parent) {
		t.Fatal("DEL of one share did not remove exactly that share")
	}
	if ifbIn(t, netnss[0]) {
		t.Error("DEL of share 0 left its ifb in the pod's netns")
	}
	if shaped, err := shape.Read(netnss[1], "net1"); err != nil || shaped.Send != 600*netshare.Mbit {
		t.Errorf("DEL of share 0 changed share 1's shaping: %+v (%v)", shaped, err)
	}
	if st := deviceStatus(t, claims[0], n.driver, "dev-0"); st != nil && st.NetworkData != nil {
		t.Errorf("DEL left share 0's status: %+v", st)
	}
	if st := deviceStatus(t, claims[1], n.driver, "dev-0"); st == nil || st.NetworkData == nil {
		t.Errorf("DEL of share 0 removed share 1's status: %+v", st)
	}
}

// A share devplumb cannot shape (its bandwidth not in whole Mbit/s, as a binary suffix
// gives it) fails ADD with an error naming the claim, the share and the bandwidth, and
// leaves nothing: no interface, no state, no network-status.
func TestCNIShareBadBandwidth(t *testing.T) {
	needSharing(t)
	n := newCNINode(t)
	parent := n.veth()
	n.slice(cniDev{"dev-0", attrs(parent, cniResource)})
	pod, _ := n.sharePod("5c0f0c4e-0000-4000-8000-000000000003", "100Mi")
	netns := testenv.NetNS(t).Path()
	res := n.run("ADD", n.shareConf("192.0.2.10/24"), netns, pod, "net1")
	if res.Code == 0 || !strings.Contains(res.Msg+res.Details, "share 5c0f0c4e-0000-4000-8000-000000000003") ||
		!strings.Contains(res.Msg+res.Details, "bandwidth 100Mi is not a whole number of Mbit/s") {
		t.Fatalf("ADD: %+v, want an error naming the share and its bandwidth", res)
	}
	if macvlanOf(t, netns, "net1") != 0 {
		t.Error("a failed ADD left an interface")
	}
	if left, _ := filepath.Glob(filepath.Join(n.dir, "state", "*", "*.json")); len(left) != 0 {
		t.Errorf("state left: %v", left)
	}
	if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name); len(ns) != 0 {
		t.Errorf("network-status left: %+v", ns)
	}
}

// A share whose interface cannot be shaped (the pod's netns holds a link by the name of
// the ifb devplumb shapes with) fails ADD after the delegate ran, with code 108 naming the
// claim's share and its rate, and leaves nothing: the delegate's macvlan is removed, the
// device freed, no network-status, no claim status entry; the pod's own link stays.
func TestCNIShareShapingFails(t *testing.T) {
	needSharing(t)
	n := newCNINode(t)
	parent := n.veth()
	n.slice(cniDev{"dev-0", attrs(parent, cniResource)})
	sid := "5c0f0c4e-0000-4000-8000-000000000004"
	pod, claim := n.sharePod(sid, "300M")
	netns := testenv.NetNS(t)
	e2etest.Must(t, netns.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: shape.IfbName("net1")}, PeerName: "peer0"})
	}))
	res := n.run("ADD", n.shareConf("192.0.2.10/24"), netns.Path(), pod, "net1")
	if res.Code != 108 || !strings.Contains(res.Msg, "share "+sid+": bandwidth 300000000 bit/s cannot be enforced on net1") {
		t.Fatalf("ADD: %+v, want code 108 naming the share and its rate", res)
	}
	if macvlanOf(t, netns.Path(), "net1") != 0 {
		t.Error("a failed ADD left the delegate's interface")
	}
	if !testenv.HasLink(t, netns, shape.IfbName("net1")) {
		t.Error("the pod's own link is gone")
	}
	if left, _ := filepath.Glob(filepath.Join(n.dir, "state", "*", "*.json")); len(left) != 0 {
		t.Errorf("state left: %v", left)
	}
	if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name); len(ns) != 0 {
		t.Errorf("network-status left: %+v", ns)
	}
	if st := deviceStatus(t, claim, n.driver, "dev-0"); st != nil && st.NetworkData != nil {
		t.Errorf("claim status left: %+v", st)
	}
}
