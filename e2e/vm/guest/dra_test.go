//go:build vmguest

package guest

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// GuestKubeconfig is where e2e/vm puts a kubeconfig for the kube-apiserver it runs on
// the host, which the guest reaches through QEMU's user network (the host is
// 10.0.2.2, the guest 10.0.2.15, on the virtio NIC).
const GuestKubeconfig = "/devplumb/kubeconfig"

const (
	draDriver = "netdev.devplumb.io"
	draNode   = "vm-node" // nodesim's node name in the API server, netdev-dp's pool
)

// apiServer brings up the guest's link to the host (its virtio NIC) and returns a
// client of the host's kube-apiserver once it answers. Without a kubeconfig (TestVM
// started no API server, and says why) the test is skipped.
func apiServer(t *testing.T) kubernetes.Interface {
	t.Helper()
	if _, err := os.Stat(GuestKubeconfig); err != nil {
		t.Skipf("no kube-apiserver for the guest (%v): TestVM says why", err)
	}
	link := virtioLink(t)
	addr, err := netlink.ParseAddr("10.0.2.15/24")
	e2etest.Must(t, err)
	e2etest.Must(t, netlink.AddrReplace(link, addr))
	e2etest.Must(t, netlink.LinkSetUp(link))
	cfg, err := clientcmd.BuildConfigFromFlags("", GuestKubeconfig)
	e2etest.Must(t, err)
	client, err := kubernetes.NewForConfig(cfg)
	e2etest.Must(t, err)
	var last error
	eventually(t, time.Minute, "the host's kube-apiserver answering", func() bool {
		_, last = client.Discovery().ServerVersion()
		return last == nil
	})
	t.Logf("the host's kube-apiserver at %s answers through %s", cfg.Host, link.Attrs().Name)
	return client
}

// virtioLink is the guest's virtio NIC, on QEMU's user network.
func virtioLink(t *testing.T) netlink.Link {
	t.Helper()
	links, err := netlink.LinkList()
	e2etest.Must(t, err)
	for _, l := range links {
		drv, err := os.Readlink(filepath.Join("/sys/class/net", l.Attrs().Name, "device", "driver"))
		if err == nil && filepath.Base(drv) == "virtio_net" {
			return l
		}
	}
	t.Fatal("the guest has no virtio_net NIC")
	return nil
}

// startDRANode starts nodesim as a kubelet with DRA against the API server (it also
// allocates claims with the scheduler's structured allocator) and netdev-dp as its DRA
// driver with the resources, and waits until nodesim has registered the driver.
func startDRANode(t *testing.T, resources ...resource) *node {
	t.Helper()
	n := &node{t: t, bin: bin(t), root: t.TempDir()}
	n.startSim("--kubeconfig", GuestKubeconfig, "--node-name", draNode)
	n.startDP(resources, "--mode", "dra", "--kubeconfig", GuestKubeconfig, "--node-name", draNode,
		"--kubelet-registrar-dir", filepath.Join(n.root, "plugins_registry"), "--kubelet-plugins-dir", filepath.Join(n.root, "plugins"))
	eventually(t, 2*time.Minute, "nodesim registering netdev-dp's DRA driver", func() bool {
		if done, err := n.dp.Exited(); done {
			t.Fatalf("netdev-dp exited: %v", err)
		}
		return n.ctl.WaitDRADriver(e2etest.Ctx(t), draDriver) == nil
	})
	return n
}

// draObjects makes the namespace (with its default ServiceAccount, which pods need), a
// DeviceClass of res's devices and a ResourceClaim "vf" for one of them; the test's end
// deletes them.
func draObjects(t *testing.T, c kubernetes.Interface, namespace, res string) {
	t.Helper()
	ctx := e2etest.Ctx(t)
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { _ = c.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}) })
	_, err = c.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		e2etest.Must(t, err)
	}
	class := "vf.devplumb.io"
	_, err = c.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && device.attributes["k8s.cni.cncf.io"].resourceName == %q`, draDriver, res)}}}}},
		metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { _ = c.ResourceV1().DeviceClasses().Delete(ctx, class, metav1.DeleteOptions{}) })
	_, err = c.ResourceV1().ResourceClaims(namespace).Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "vf"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "vf", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}}}}, metav1.CreateOptions{})
	e2etest.Must(t, err)
}

// sliceDevices are the devices of netdev-dp's slices for this node, by name, once
// cond holds for them.
func sliceDevices(t *testing.T, c kubernetes.Interface, what string, cond func(map[string]resourceapi.Device) bool) map[string]resourceapi.Device {
	t.Helper()
	var out map[string]resourceapi.Device
	eventually(t, 2*time.Minute, what, func() bool {
		list, err := c.ResourceV1().ResourceSlices().List(e2etest.Ctx(t), metav1.ListOptions{})
		e2etest.Must(t, err)
		out = map[string]resourceapi.Device{}
		for _, s := range list.Items {
			if s.Spec.Driver == draDriver && s.Spec.NodeName != nil && *s.Spec.NodeName == draNode {
				for _, d := range s.Spec.Devices {
					out[d.Name] = d
				}
			}
		}
		return cond(out)
	})
	return out
}

// sliceVFs are the n devices of netdev-dp's slices as the PCI addresses their
// k8s.cni.cncf.io/deviceID attribute gives, by name; each device's standard
// resource.kubernetes.io/pciBusID must be the same address.
func sliceVFs(t *testing.T, c kubernetes.Interface, n int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, d := range sliceDevices(t, c, fmt.Sprintf("%d devices in netdev-dp's ResourceSlices", n), func(m map[string]resourceapi.Device) bool { return len(m) == n }) {
		id, bus := d.Attributes["k8s.cni.cncf.io/deviceID"].StringValue, d.Attributes["resource.kubernetes.io/pciBusID"].StringValue
		if id == nil || bus == nil || *id != *bus {
			t.Fatalf("device %s: deviceID %v, pciBusID %v", name, id, bus)
		}
		out[name] = *id
	}
	return out
}

// onlyTainted holds when the slices have exactly the device name, with netdev-dp's
// unhealthy taint.
func onlyTainted(name string) func(map[string]resourceapi.Device) bool {
	return func(m map[string]resourceapi.Device) bool {
		d, ok := m[name]
		return len(m) == 1 && ok && slices.ContainsFunc(d.Taints, func(t resourceapi.DeviceTaint) bool { return t.Key == draDriver+"/unhealthy" })
	}
}

// netdev-dp as a DRA driver on real VFs, against a real kube-apiserver (on the host):
// its slices publish the PF's two igbvf VFs with their PCI addresses; nodesim (the
// kubelet, and the scheduler's allocator) gives a pod's claim one of them and has
// netdev-dp prepare it; devplumb finds the claim's device through PodResources and
// delegates to host-device with the VF's PCI address, which moves the VF's netdev into
// the pod with its network's IP; the claim's status.devices entry for that device
// carries networkData (interface, IP, the VF's MAC) and the pod's network-status the
// VF's PCI address; DEL gives the VF back to the host and clears the entry. Then
// sriov_numvfs 2 -> 0: the free VF leaves the slices at once, the claim's stays,
// tainted, until the pod's deletion unprepares the claim.
func TestDRAClaimGetsAVF(t *testing.T) {
	c := apiServer(t)
	p := pfs(t)[0]
	vfs := p.setVFs(t, 2)
	nics := hostNICs(t, vfs)
	const res, namespace, pod = "devplumb.io/vf-dra", "vm-dra", "dra-pod"
	draObjects(t, c, namespace, res)
	n := startDRANode(t, resource{res, map[string]any{"drivers": []string{"igbvf"}, "pfNames": []string{p.netdev}}})
	published := sliceVFs(t, c, 2)
	if got := slices.Sorted(maps.Values(published)); !slices.Equal(got, sorted(vfs)) {
		t.Fatalf("slices publish %v, want the VFs %v", published, vfs)
	}

	alloc, err := n.ctl.AddPod(e2etest.Ctx(t), kubeletsim.PodSpec{Namespace: namespace, Name: pod,
		Claims:     []kubeletsim.PodClaim{{Name: "net", ResourceClaimName: "vf"}},
		Containers: []kubeletsim.ContainerSpec{{Name: "app", Claims: []string{"net"}}}})
	e2etest.Must(t, err)
	if len(alloc.Claims) != 1 || len(alloc.Claims[0].Devices) != 1 {
		t.Fatalf("pod %s: claims %+v", pod, alloc.Claims)
	}
	dev := alloc.Claims[0].Devices[0]
	vf := published[dev.Device]
	if dev.Driver != draDriver || dev.Pool != draNode || vf == "" {
		t.Fatalf("the claim's device %+v is none of the published VFs %v", dev, published)
	}
	t.Logf("claim %s/vf allocated %s (VF %s), prepared as %v", namespace, dev.Device, vf, dev.CDIDeviceIDs)

	netns := testenv.NetNS(t)
	conf := n.draNetwork("sriov-dra", res, "10.56.9.2/24")
	call := e2etest.CNICall{Command: "ADD", ContainerID: "infra-" + pod, NetNS: netns.Path(), IfName: "net1", Conf: conf,
		Args: fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s;K8S_POD_INFRA_CONTAINER_ID=infra-%s", namespace, pod, alloc.UID, pod)}
	if r := e2etest.RunDevplumb(t, n.bin, call); r.Code != 0 {
		t.Fatalf("ADD: %+v", r)
	}
	mac := podNIC(t, netns, "net1", "10.56.9.2/24")
	if mac != nics[vf].mac {
		t.Fatalf("the pod's net1 has MAC %s, the claim's VF %s has %s", mac, vf, nics[vf].mac)
	}
	if left := vfNetdevs(vf); len(left) != 0 {
		t.Errorf("VF %s still has netdevs %v in the host netns", vf, left)
	}
	checkClaimStatus(t, c, namespace, dev, "net1", "10.56.9.2/24", mac)
	checkNetworkStatus(t, c, namespace, pod, vf)

	call.Command = "DEL"
	if r := e2etest.RunDevplumb(t, n.bin, call); r.Code != 0 {
		t.Fatalf("DEL: %+v", r)
	}
	if got := hostNICs(t, []string{vf})[vf]; got != nics[vf] {
		t.Errorf("VF %s back on the host as %+v, had %+v", vf, got, nics[vf])
	}
	checkClaimStatus(t, c, namespace, dev, "", "", "")

	write(t, p.sysfs("sriov_numvfs"), "0")
	sliceDevices(t, c, "only the claim's VF in the slices, tainted, once the VFs are gone", onlyTainted(dev.Device))
	t.Logf("sriov_numvfs 0: the free VF left the slices; the claim's %s stays, tainted", dev.Device)
	e2etest.Must(t, n.ctl.DelPod(e2etest.Ctx(t), namespace, pod))
	claim, err := c.ResourceV1().ResourceClaims(namespace).Get(e2etest.Ctx(t), "vf", metav1.GetOptions{})
	e2etest.Must(t, err)
	if len(claim.Status.ReservedFor) != 0 {
		t.Errorf("claim still reserved for %+v after the pod's deletion", claim.Status.ReservedFor)
	}
	sliceDevices(t, c, "no device in the slices once the pod's deletion unprepared the claim", func(m map[string]resourceapi.Device) bool { return len(m) == 0 })
}

// draNetwork is a devplumb network of res delegating to host-device with a static
// address; its node keys (which e2etest moves to a node config) this node's, with the
// kubeconfig for the claim status and network-status writes.
func (n *node) draNetwork(name, res, addr string) map[string]any {
	conf := n.network(name, res, addr)
	conf["kubeconfig"] = GuestKubeconfig
	return conf
}

// podNIC is the MAC of ifName in netns, which must have exactly addr.
func podNIC(t *testing.T, netns ns.NetNS, ifName, addr string) string {
	t.Helper()
	var mac string
	var addrs []netlink.Addr
	e2etest.Must(t, netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(ifName)
		if err != nil {
			return err
		}
		mac = l.Attrs().HardwareAddr.String()
		addrs, err = netlink.AddrList(l, netlink.FAMILY_V4)
		return err
	}))
	if len(addrs) != 1 || addrs[0].IPNet.String() != addr {
		t.Errorf("the pod's %s has addresses %v, want %s", ifName, addrs, addr)
	}
	return mac
}

// checkClaimStatus checks the claim's status.devices entry of dev: devplumb's
// networkData (interface, IP, MAC) when ifName is set, else no networkData at all.
func checkClaimStatus(t *testing.T, c kubernetes.Interface, namespace string, dev kubeletsim.PreparedDevice, ifName, ip, mac string) {
	t.Helper()
	claim, err := c.ResourceV1().ResourceClaims(namespace).Get(e2etest.Ctx(t), "vf", metav1.GetOptions{})
	e2etest.Must(t, err)
	var nd *resourceapi.NetworkDeviceData
	for _, s := range claim.Status.Devices {
		if s.Driver == dev.Driver && s.Pool == dev.Pool && s.Device == dev.Device {
			nd = s.NetworkData
		}
	}
	switch {
	case ifName == "" && nd != nil:
		t.Errorf("the claim's networkData after DEL: %+v", nd)
	case ifName == "":
	case nd == nil:
		t.Errorf("the claim's status.devices has no networkData for %s: %+v", dev.Device, claim.Status.Devices)
	case nd.InterfaceName != ifName || !slices.Equal(nd.IPs, []string{ip}) || !strings.EqualFold(nd.HardwareAddress, mac):
		t.Errorf("the claim's networkData %+v, want interface %s, IP %s, MAC %s", nd, ifName, ip, mac)
	default:
		t.Logf("the claim's status.devices entry for %s: networkData %+v", dev.Device, *nd)
	}
}

// statusEntry is the part of a network-status entry checked here.
type statusEntry struct {
	DeviceInfo *devinfo.DeviceInfo `json:"device-info"`
}

// checkNetworkStatus checks that the pod's network-status annotation names the VF's
// PCI address (its device-info).
func checkNetworkStatus(t *testing.T, c kubernetes.Interface, namespace, pod, vf string) {
	t.Helper()
	p, err := c.CoreV1().Pods(namespace).Get(e2etest.Ctx(t), pod, metav1.GetOptions{})
	e2etest.Must(t, err)
	raw := p.Annotations["k8s.v1.cni.cncf.io/network-status"]
	var entries []statusEntry
	if err := json.Unmarshal([]byte(raw), &entries); err != nil {
		t.Fatalf("the pod's network-status %q: %v", raw, err)
	}
	if !slices.ContainsFunc(entries, func(e statusEntry) bool {
		return e.DeviceInfo != nil && e.DeviceInfo.Pci != nil && e.DeviceInfo.Pci.PciAddress == vf
	}) {
		t.Errorf("the pod's network-status does not name VF %s: %s", vf, raw)
	}
}
