package node_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/node"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// draConflist is devplumb alone in the node's conflist with the config a device-plugin
// user already has (resourceName), which takes DRA devices by their resourceName
// attribute: from PodResources when the kubelet reports the claim, else from the API server.
var draConflist = hostDeviceConflist("devplumb-dra", draResource, "192.0.2.30/24")

// TestDRAClaimToPodNetwork (issue 12, on the real node): netdev-dp in DRA mode; the real
// scheduler allocates each pod's claim, the real kubelet prepares it through the driver,
// and devplumb, the node's CNI with a resourceName config, gives each pod its claim's
// device as eth0: for a claim the container references (the kubelet reports it in
// PodResources) and for a network-only claim named directly (only the API server knows
// it). Both pods run with their device; network-status and the claim's
// status.devices[].networkData (with a Ready condition) carry the interface; deleting the
// pods removes devplumb's status entry while the claim is still allocated, unprepares the
// claims (CDI spec entries gone) and leaves no CNI device-info file or devplumb state.
func TestDRAClaimToPodNetwork(t *testing.T) {
	draMode(t)
	c := ctx(t)
	useConflist(t, "devplumb-dra", draConflist)
	tmpl := claimTemplate(t, "hostdev-net", draClass)
	direct := directClaim(t, "hostdev-direct", draClass)

	used := createClaimPod(t, "dranet-used", tmpl, true, nil)
	netOnly := createDirectClaimPod(t, "dranet-netonly", direct, nil)
	var devs []draDevice
	for _, p := range []*corev1.Pod{used, netOnly} {
		waitRunning(t, p)
		d := allocated(t, p, draResource)
		devs = append(devs, d)
		if _, err := netlink.LinkByName(d.id); err == nil {
			t.Errorf("%s, pod %s's device, is still on the host", d.id, p.Name)
		}
		checkInterface(t, p, podView(t, p), "eth0", d.id)
		entry := networkStatus(t, p, "devplumb-dra", "eth0")
		if !slices.Contains(entry.IPs, "192.0.2.30") {
			t.Errorf("pod %s: network-status entry %+v, want IP 192.0.2.30", p.Name, entry)
		}
		checkNetworkData(t, d, "eth0", "192.0.2.30/24", entry.Mac)
	}
	if devs[0].id == devs[1].id {
		t.Fatalf("both pods got device %s", devs[0].id)
	}
	if log := podLog(t, used); !strings.Contains(log, cdispec.EnvName(draResource, devs[0].id)+"=") {
		t.Errorf("pod %s: no CDI device of its claim in the container:\n%s", used.Name, log)
	}

	watches := make([]watch.Interface, len(devs))
	for i, d := range devs {
		w, err := nd.Client.ResourceV1().ResourceClaims("default").Watch(c, metav1.ListOptions{
			FieldSelector: "metadata.name=" + d.claim.Name, ResourceVersion: d.claim.ResourceVersion})
		e2etest.Must(t, err)
		defer w.Stop()
		watches[i] = w
	}
	deletePod(t, used)
	deletePod(t, netOnly)
	for i, d := range devs {
		checkStatusRemovedFirst(t, watches[i], d)
		waitFor(t, d.id+" back on the host", func(context.Context) error {
			_, err := netlink.LinkByName(d.id)
			return err
		})
	}
	waitClaimsDeleted(t, devs[0]) // the template's claim goes with its pod; the direct one stays
	waitUnprepared(t, devs...)
	checkNoCNIFiles(t)
}

// directClaim creates a ResourceClaim in default asking for one device of class.
func directClaim(t *testing.T, name, class string) string {
	t.Helper()
	cl := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}}},
	}
	cc := nd.Client.ResourceV1().ResourceClaims("default")
	_, err := cc.Create(ctx(t), cl, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { e2etest.Must(t, cc.Delete(context.Background(), name, metav1.DeleteOptions{})) })
	return name
}

// createDirectClaimPod creates a busybox pod with the pod claim "net" naming the
// ResourceClaim claim, referenced by no container (network-only).
func createDirectClaimPod(t *testing.T, name, claim string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	one := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &one,
			Containers: []corev1.Container{{Name: "c", Image: node.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "env; " + linksScript}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "net", ResourceClaimName: &claim}},
		},
	}
	out, err := nd.Client.CoreV1().Pods("default").Create(ctx(t), pod, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { deletePod(t, out) })
	return out
}

// devplumbEntry is the claim's status.devices[] entry of device d, if it has one.
func devplumbEntry(cl *resourceapi.ResourceClaim, d draDevice) *resourceapi.AllocatedDeviceStatus {
	for i, s := range cl.Status.Devices {
		if s.Driver == draDriver && s.Pool == d.pool && s.Device == d.name {
			return &cl.Status.Devices[i]
		}
	}
	return nil
}

// checkNetworkData: the claim's status.devices[] entry for the device names the pod's
// interface, its IP in CIDR form and its MAC (as network-status has it), and is Ready.
func checkNetworkData(t *testing.T, d draDevice, ifName, ip, mac string) {
	t.Helper()
	cl, err := nd.Client.ResourceV1().ResourceClaims("default").Get(ctx(t), d.claim.Name, metav1.GetOptions{})
	e2etest.Must(t, err)
	e := devplumbEntry(cl, d)
	if e == nil {
		t.Fatalf("claim %s: no status.devices entry for %s/%s: %+v", cl.Name, d.pool, d.name, cl.Status.Devices)
	}
	net := e.NetworkData
	if net == nil || net.InterfaceName != ifName || !slices.Equal(net.IPs, []string{ip}) || net.HardwareAddress == "" || net.HardwareAddress != mac {
		t.Errorf("claim %s: networkData %+v, want %s, [%s], MAC %s", cl.Name, net, ifName, ip, mac)
	}
	if !slices.ContainsFunc(e.Conditions, func(c metav1.Condition) bool { return c.Type == "Ready" && c.Status == metav1.ConditionTrue }) {
		t.Errorf("claim %s: device conditions %+v, want Ready True", cl.Name, e.Conditions)
	}
}

// checkStatusRemovedFirst follows the claim's changes from before the pod's deletion:
// devplumb's entry must go (its CNI DEL) while the claim is still allocated, not only
// with the allocation or the claim itself.
func checkStatusRemovedFirst(t *testing.T, w watch.Interface, d draDevice) {
	t.Helper()
	has := func(cl *resourceapi.ResourceClaim) bool {
		e := devplumbEntry(cl, d)
		return e != nil && e.NetworkData != nil
	}
	seen := has(d.claim) // the watch starts at this version
	for ev := range w.ResultChan() {
		cl, ok := ev.Object.(*resourceapi.ResourceClaim)
		if !ok {
			t.Fatalf("claim %s: watch event %s %T", d.claim.Name, ev.Type, ev.Object)
		}
		if ev.Type == watch.Deleted || cl.Status.Allocation == nil {
			t.Fatalf("claim %s %s (allocated: %t) before devplumb removed its status entry", cl.Name, ev.Type, cl.Status.Allocation != nil)
		}
		if has(cl) {
			seen = true
		} else if seen {
			return
		}
	}
	t.Fatalf("claim %s: watch ended before devplumb removed its status entry", d.claim.Name)
}

// TestDRAUnderMultus: Multus v4.3.0 thick is the node's CNI. It maps a pod's DRA devices by
// ResourceClaim name (from PodResources, so only claims a container references), never
// by the NAD's resourceName, so for a DRA pod it passes devplumb no device. A NAD like
// deployments/nads/multus-delegation.yaml whose devplumb config also names the resource
// and a kubeconfig serves a pod whose network-only claim (named directly) holds the
// device: devplumb finds it through the API server, the pod's net1 is that device,
// Multus's network-status entry and the claim's networkData say so, and deleting the pod
// removes devplumb's status entry while the claim is allocated and leaves nothing.
func TestDRAUnderMultus(t *testing.T) {
	draMode(t)
	multusAsNodeCNI(t, multusThick)
	nad := draNAD(t)
	claim := directClaim(t, "hostdev-multus", draClass)
	pod := createDirectClaimPod(t, "dra-multus", claim, map[string]string{nadv1.NetworkAttachmentAnnot: nad + "@net1"})
	waitRunning(t, pod)
	d := allocated(t, pod, draResource)
	checkInterface(t, pod, podView(t, pod), "net1", d.id)
	entry := networkStatus(t, pod, "default/"+nad, "net1")
	if !slices.Contains(entry.IPs, "198.51.100.10") {
		t.Errorf("network-status entry %+v: want IP 198.51.100.10", entry)
	}
	checkNetworkData(t, d, "net1", "198.51.100.10/24", entry.Mac)

	w, err := nd.Client.ResourceV1().ResourceClaims("default").Watch(ctx(t), metav1.ListOptions{
		FieldSelector: "metadata.name=" + d.claim.Name, ResourceVersion: d.claim.ResourceVersion})
	e2etest.Must(t, err)
	defer w.Stop()
	deletePod(t, pod)
	checkStatusRemovedFirst(t, w, d)
	waitFor(t, d.id+" back on the host", func(context.Context) error {
		_, err := netlink.LinkByName(d.id)
		return err
	})
	waitUnprepared(t, d)
	checkNoCNIFiles(t)
}

// draNAD creates, from the applied deployments/nads/multus-delegation.yaml, a NAD whose
// devplumb config also has "resourceName" (the annotation's), and returns its name.
// devplumb's kubeconfig is the node config's (the installer's node.json): a NAD may not
// name one.
func draNAD(t *testing.T) string {
	t.Helper()
	return nadVariant(t, "netdev-net", "netdev-dra", func(conf map[string]any, annotations map[string]string) {
		conf["resourceName"] = annotations["k8s.v1.cni.cncf.io/resourceName"]
	})
}

// checkNoCNIFiles: no CNI device-info file and no devplumb attachment state is left.
func checkNoCNIFiles(t *testing.T) {
	t.Helper()
	for _, dir := range []string{"/run/k8s.cni.cncf.io/devinfo/cni", "/var/lib/cni/devplumb/attachments"} {
		if left := testenv.Files(t, nd.HostPath(dir)); len(left) > 0 {
			t.Errorf("left in %s after the pods were deleted: %v", dir, left)
		}
	}
}

// TestDRAShippedNADUnderMultus: the shipped deployments/nads/multus-delegation.yaml as it
// is serves a DRA pod under Multus v4.3.0 thick. Multus looks the NAD's resourceName up
// among the pod's device-plugin resources and its DRA claims by claim name, finds nothing
// and passes devplumb no device; devplumb then reads the NAD's resourceName annotation
// itself, with the node config's kubeconfig (which every network on the node has since a
// NAD may no longer name one), and takes the pod's claim device of that resource: net1 is
// that device and the claim's networkData says so; the NAD's "networkStatus": "none"
// leaves the network-status list to Multus.
func TestDRAShippedNADUnderMultus(t *testing.T) {
	draMode(t)
	multusAsNodeCNI(t, multusThick)
	tmpl := claimTemplate(t, "hostdev-shipped", draClass)
	pod := createClaimPod(t, "dra-shipped-nad", tmpl, true, map[string]string{nadv1.NetworkAttachmentAnnot: "netdev-net@net1"})
	waitRunning(t, pod)
	d := allocated(t, pod, draResource)
	checkInterface(t, pod, podView(t, pod), "net1", d.id)
	entry := networkStatus(t, pod, "default/netdev-net", "net1")
	checkNetworkData(t, d, "net1", "198.51.100.10/24", entry.Mac)
	deletePod(t, pod)
	waitFor(t, d.id+" back on the host", func(context.Context) error {
		_, err := netlink.LinkByName(d.id)
		return err
	})
	waitUnprepared(t, d)
	checkNoCNIFiles(t)
}
