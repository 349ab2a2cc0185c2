package dra_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// TestExtendedResourceDevicePluginThenDRA (issue 22, on nodesim with the real API server):
// one Pod object asking resources.limits {example.com/hostdev: 2} and one devplumb config
// (resourceName example.com/hostdev, as a device-plugin user has it) with two attachments
// (net1, net2, as the runtime or Multus calls devplumb for two networks of the same NAD)
// get the node's two veth ends, first from netdev-dp as a device plugin, then, with the
// shipped DeviceClass's extendedResourceName, from netdev-dp as a DRA driver:
//   - nodesim, as the 1.37 scheduler, makes the pod's claim (annotation, owner, request
//     container-0-request-0 of two devices) and the pod's status.extendedResourceClaimStatus,
//     and, as the kubelet, reports the claim under dynamic_resources, not devices;
//   - devplumb finds net1's device through the API server (as with a kubelet that does not
//     report the claim), net2's through the kubelet, which lists the claim's second device
//     with the first's CDI device before its own: each takes the other device;
//     network-status and the claim's status.devices[].networkData carry both; DEL clears
//     them.
func TestExtendedResourceDevicePluginThenDRA(t *testing.T) {
	veths := []string{testenv.VethPair(t, "ext") + "a", testenv.VethPair(t, "ext") + "a"}
	slices.Sort(veths)
	n := newDriverNode(t, resources.Resource{ResourceName: drvResHostdev, NetDevs: &link.Config{Names: veths}})
	needExtendedResources(t, "hostdev.example.com")
	testenv.CNIPlugins(t)
	sim := n.startNodesim()
	pod := extPod(t, "ext-"+n.name, n.name)
	cn := &cniNode{t: t, dir: n.dir, bin: testenv.Build(t, "./cmd/devplumb"), name: n.name, driver: drvDriver,
		network: "ext-net-" + cniRandom(), pr: &podresourcestest.Server{Socket: filepath.Join(n.dir, "pod-resources", "kubelet.sock")}}
	conf := cn.conf(map[string]any{"resourceName": drvResHostdev, "deviceInfoDir": n.devinfoDir,
		"delegate": map[string]any{"type": "host-device"}})

	// Device-plugin mode: the kubelet's devices, under devices.
	dp := n.startDevicePlugin(sim)
	out := simCLI(t, sim, "pod", "add", "--root", n.dir, "--namespace", cniNS, "--name", pod.Name, "--uid", string(pod.UID),
		"--container", "app="+drvResHostdev+":2")
	var alloc kubeletsim.PodAllocation
	e2etest.Must(t, json.Unmarshal([]byte(out), &alloc))
	if got := slices.Sorted(slices.Values(alloc.Devices(drvResHostdev))); !slices.Equal(got, veths) || len(alloc.Claims) != 0 {
		t.Fatalf("device-plugin mode: devices %v, claims %+v; want %v and no claim", got, alloc.Claims, veths)
	}
	extAttachments(t, cn, conf, pod, conf, veths, nil)
	simCLI(t, sim, "pod", "del", "--root", n.dir, "--namespace", cniNS, "--name", pod.Name)
	dp.Terminate(10 * time.Second)

	// DRA mode: the same pod spec, the same config.
	n.start()
	simCLI(t, sim, "wait", "--root", n.dir, "--driver", drvDriver)
	n.waitDevices("the veths published", func(m map[string]resourceapi.Device) bool {
		_, a := m[veths[0]]
		_, b := m[veths[1]]
		return a && b
	})
	out = simCLI(t, sim, "pod", "add", "--root", n.dir, "--namespace", cniNS, "--name", pod.Name, "--container", "app="+drvResHostdev+":2")
	alloc = kubeletsim.PodAllocation{}
	e2etest.Must(t, json.Unmarshal([]byte(out), &alloc))
	claim := checkExtendedClaim(t, pod, &alloc, veths)
	checkReportedUnderDynamicResources(t, cn.pr.Socket, pod, claim)
	// A kubelet that does not report the claim: devplumb asks the API server.
	noReport := podresourcestest.NewServer(t)
	noReport.SetPod(&v1.PodResources{Namespace: cniNS, Name: pod.Name, Containers: []*v1.ContainerResources{{Name: "app"}}})
	apiConf := cn.conf(map[string]any{"resourceName": drvResHostdev, "deviceInfoDir": n.devinfoDir,
		"delegate": map[string]any{"type": "host-device"}, "podResourcesSocket": noReport.Socket})
	extAttachments(t, cn, apiConf, pod, conf, veths, claim)
	simCLI(t, sim, "pod", "del", "--root", n.dir, "--namespace", cniNS, "--name", pod.Name)
}

// startNodesim starts nodesim as the node's kubelet with DRA (until the test ends) and
// returns its binary.
func (n *driverNode) startNodesim() string {
	t := n.t
	t.Helper()
	bin := filepath.Join(testenv.Build(t, "./cmd/nodesim"), "nodesim")
	sim, err := kubeapi.Spawn(n.dir, "nodesim", bin, "serve", "--root", n.dir, "--kubeconfig", srv.Kubeconfig, "--node-name", n.name)
	e2etest.Must(t, err)
	t.Cleanup(func() { sim.Terminate(10 * time.Second) })
	simWaitServing(t, n.dir, sim)
	return bin
}

// startDevicePlugin runs netdev-dp in device-plugin mode with the node's config and
// waits until nodesim has its example.com/hostdev devices.
func (n *driverNode) startDevicePlugin(sim string) *kubeapi.Proc {
	n.t.Helper()
	p, err := kubeapi.Spawn(n.dir, "netdev-dp-dp", n.bin, "--config="+n.config, "--plugin-dir="+filepath.Join(n.dir, "device-plugins"),
		"--sysfs-root="+n.sysfs, "--devinfo-dir="+n.devinfoDir, "--cdi-dir="+n.cdiDir,
		"--pod-resources-socket="+filepath.Join(n.dir, "pod-resources", "kubelet.sock"))
	e2etest.Must(n.t, err)
	n.t.Cleanup(func() { p.Terminate(10 * time.Second) })
	simCLI(n.t, sim, "wait", "--root", n.dir, "--resource", drvResHostdev)
	return p
}

// extPod creates the Pod object on the node: one container asking
// resources.limits {example.com/hostdev: 2}, as a device-plugin user writes it.
func extPod(t *testing.T, name, node string) *corev1.Pod {
	t.Helper()
	two := corev1.ResourceList{drvResHostdev: resource.MustParse("2")}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cniNS, Name: name}, Spec: corev1.PodSpec{NodeName: node,
		Containers: []corev1.Container{{Name: "app", Image: "busybox", ImagePullPolicy: corev1.PullNever,
			Resources: corev1.ResourceRequirements{Limits: two, Requests: two}}}}}
	out, err := srv.Client.CoreV1().Pods(cniNS).Create(e2etest.Ctx(t), pod, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { e2etest.Must(t, srv.DeletePod(e2etest.Ctx(t), cniNS, name)) })
	return out
}

// checkExtendedClaim checks what nodesim did as the scheduler and returns the claim:
// one claim of the pod's, made for its extended resource, allocated the two veths on
// this node and reserved for the pod, which the pod's status names with its mapping.
func checkExtendedClaim(t *testing.T, pod *corev1.Pod, alloc *kubeletsim.PodAllocation, veths []string) *resourceapi.ResourceClaim {
	t.Helper()
	if alloc.UID != string(pod.UID) || len(alloc.Devices(drvResHostdev)) != 0 || len(alloc.Claims) != 1 || !alloc.Claims[0].Extended {
		t.Fatalf("DRA mode: pod %+v: want the Pod object's UID, no device plugin devices, the one extended-resource claim", alloc)
	}
	p, err := srv.Client.CoreV1().Pods(cniNS).Get(e2etest.Ctx(t), pod.Name, metav1.GetOptions{})
	e2etest.Must(t, err)
	st := p.Status.ExtendedResourceClaimStatus
	want := []corev1.ContainerExtendedResourceRequest{{ContainerName: "app", ResourceName: drvResHostdev, RequestName: "container-0-request-0"}}
	if st == nil || st.ResourceClaimName != alloc.Claims[0].Name || !slices.Equal(st.RequestMappings, want) {
		t.Fatalf("pod status.extendedResourceClaimStatus %+v, want claim %s with %+v", st, alloc.Claims[0].Name, want)
	}
	claim, err := srv.Client.ResourceV1().ResourceClaims(cniNS).Get(e2etest.Ctx(t), st.ResourceClaimName, metav1.GetOptions{})
	e2etest.Must(t, err)
	reqs := claim.Spec.Devices.Requests
	if claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" || len(claim.OwnerReferences) != 1 ||
		claim.OwnerReferences[0].UID != pod.UID || len(reqs) != 1 || reqs[0].Name != "container-0-request-0" ||
		reqs[0].Exactly == nil || reqs[0].Exactly.DeviceClassName != "hostdev.example.com" || reqs[0].Exactly.Count != 2 {
		t.Fatalf("claim %s: annotations %v, owners %+v, requests %+v", claim.Name, claim.Annotations, claim.OwnerReferences, reqs)
	}
	var got []string
	for _, r := range claim.Status.Allocation.Devices.Results {
		got = append(got, r.Device)
	}
	if slices.Sort(got); !slices.Equal(got, veths) || len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].UID != pod.UID {
		t.Fatalf("claim %s: allocated %v, reserved for %+v", claim.Name, got, claim.Status.ReservedFor)
	}
	return claim
}

// checkReportedUnderDynamicResources: the kubelet reports the claim for the container,
// under dynamic_resources, and none of the resource's devices under devices.
func checkReportedUnderDynamicResources(t *testing.T, socket string, pod *corev1.Pod, claim *resourceapi.ResourceClaim) {
	t.Helper()
	c, err := podresources.New(socket)
	e2etest.Must(t, err)
	defer c.Close()
	p, err := c.Get(e2etest.Ctx(t), cniNS, pod.Name)
	e2etest.Must(t, err)
	ctrs := p.GetContainers()
	if len(ctrs) != 1 || len(ctrs[0].GetDevices()) != 0 || len(ctrs[0].GetDynamicResources()) != 1 ||
		ctrs[0].GetDynamicResources()[0].GetClaimName() != claim.Name || len(ctrs[0].GetDynamicResources()[0].GetClaimResources()) != 2 {
		t.Fatalf("PodResources: %v, want the claim %s with two devices under dynamic_resources only", p, claim.Name)
	}
}

// extAttachments runs ADD of net1 (conf1) and net2 (conf2) for the pod and checks they
// took the two veths, one each, that network-status and, for DRA (claim), the claim's
// status.devices[] carry both; then DEL of both brings the veths back and clears them.
func extAttachments(t *testing.T, cn *cniNode, conf1 map[string]any, pod *corev1.Pod, conf2 map[string]any, veths []string, claim *resourceapi.ResourceClaim) {
	t.Helper()
	netns := testenv.NetNS(t).Path()
	for i, conf := range []map[string]any{conf1, conf2} {
		if res := cn.run("ADD", conf, netns, pod, fmt.Sprintf("net%d", i+1)); res.Code != 0 {
			t.Fatalf("ADD net%d: %+v", i+1, res)
		}
	}
	for _, v := range veths {
		if onHost(v) {
			t.Errorf("%s is still on the host after both ADDs", v)
		}
	}
	ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name)
	if len(ns) != 2 || ns[0].Interface == ns[1].Interface {
		t.Errorf("network-status %+v, want net1 and net2", ns)
	}
	for _, v := range veths {
		if st := extDeviceStatus(t, claim, v); claim != nil && (st == nil || st.NetworkData == nil || st.NetworkData.InterfaceName == "") {
			t.Errorf("claim %s: status of %s %+v, want its interface", claim.Name, v, st)
		}
	}
	for i, conf := range []map[string]any{conf1, conf2} {
		if res := cn.run("DEL", conf, netns, pod, fmt.Sprintf("net%d", i+1)); res.Code != 0 {
			t.Fatalf("DEL net%d: %+v", i+1, res)
		}
	}
	for _, v := range veths {
		if !onHost(v) {
			t.Errorf("DEL did not bring %s back", v)
		}
		if st := extDeviceStatus(t, claim, v); st != nil {
			t.Errorf("claim %s: status of %s after DEL %+v", claim.Name, v, st)
		}
	}
	if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name); len(ns) != 0 {
		t.Errorf("network-status after DEL: %+v", ns)
	}
}

func extDeviceStatus(t *testing.T, claim *resourceapi.ResourceClaim, device string) *resourceapi.AllocatedDeviceStatus {
	if claim == nil {
		return nil
	}
	return deviceStatus(t, claim.Name, drvDriver, device)
}

// TestNodesimWipesDeregisteredDriverSlices: as the kubelet does, nodesim deletes at its
// start the node's ResourceSlices a driver left while it was down, and a DRA driver's
// ResourceSlices of the node once the driver has been gone (its registration socket
// removed) for the wipe delay, and no other driver's.
func TestNodesimWipesDeregisteredDriverSlices(t *testing.T) {
	node := "wipe-" + cniRandom()
	root, err := os.MkdirTemp("", "ns") // short: unix socket paths are
	e2etest.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	left := "left-" + cniRandom() + ".example.com"
	_, err = srv.Client.ResourceV1().ResourceSlices().Create(e2etest.Ctx(t), &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-"},
		Spec: resourceapi.ResourceSliceSpec{Driver: left, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "dev-0"}}}}, metav1.CreateOptions{})
	e2etest.Must(t, err)
	n, err := kubeletsim.StartWithOptions(e2etest.Ctx(t), root, simLogger(),
		kubeletsim.Options{DRA: &kubeletsim.DRAOptions{Client: srv.Client, NodeName: node, WipeDelay: 100 * time.Millisecond}})
	e2etest.Must(t, err)
	t.Cleanup(n.Stop)
	t.Cleanup(func() { simDeleteNode(node) })
	gone := simStartDriver(t, root, node, "g-"+cniRandom()+".example.com", []string{"dev-0", "dev-1"})
	stays := simStartDriver(t, root, node, "s-"+cniRandom()+".example.com", []string{"dev-0"})
	e2etest.Must(t, n.WaitDRADriver(e2etest.Ctx(t), gone.name))
	e2etest.Must(t, n.WaitDRADriver(e2etest.Ctx(t), stays.name))
	simWaitSlice(t, node, left, 0)
	gone.helper.Stop()
	simWaitSlice(t, node, gone.name, 0)
	simWaitSlice(t, node, stays.name, 1)
	if drivers := n.DRADrivers(); len(drivers) != 1 || drivers[0].Driver != stays.name {
		t.Errorf("registered drivers %+v, want only %s", drivers, stays.name)
	}
}

// TestExtendedResourceByDeviceClassName: a pod asks for the devices of the DeviceClass by
// its implicit extended resource name, deviceclass.resource.kubernetes.io/hostdev.example.com,
// and the devplumb config names that resource: the kubelet's CDI devices are of
// netdev-dp's resource example.com/hostdev, so devplumb finds the two devices through the
// pod's status.extendedResourceClaimStatus and the claim, and uses them, net1 and net2,
// by the driver's resource (its device-info files).
func TestExtendedResourceByDeviceClassName(t *testing.T) {
	const implicit = "deviceclass.resource.kubernetes.io/hostdev.example.com"
	veths := []string{testenv.VethPair(t, "ext") + "a", testenv.VethPair(t, "ext") + "a"}
	slices.Sort(veths)
	n := newDriverNode(t, resources.Resource{ResourceName: drvResHostdev, NetDevs: &link.Config{Names: veths}})
	needExtendedResources(t, "hostdev.example.com")
	testenv.CNIPlugins(t)
	sim := n.startUnderNodesim()
	n.waitDevices("the veths published", func(m map[string]resourceapi.Device) bool { return len(m) == 8 })
	name := "impl-" + n.name
	out := simCLI(t, sim, "pod", "add", "--root", n.dir, "--namespace", cniNS, "--name", name, "--container", "app="+implicit+":2")
	var alloc kubeletsim.PodAllocation
	e2etest.Must(t, json.Unmarshal([]byte(out), &alloc))
	if len(alloc.Claims) != 1 || !alloc.Claims[0].Extended || len(alloc.Claims[0].Devices) != 2 {
		t.Fatalf("pod add: %+v, want the extended-resource claim with two devices", alloc)
	}
	pod, err := srv.Client.CoreV1().Pods(cniNS).Get(e2etest.Ctx(t), name, metav1.GetOptions{})
	e2etest.Must(t, err)
	claim, err := srv.Client.ResourceV1().ResourceClaims(cniNS).Get(e2etest.Ctx(t), alloc.Claims[0].Name, metav1.GetOptions{})
	e2etest.Must(t, err)
	cn := &cniNode{t: t, dir: n.dir, bin: testenv.Build(t, "./cmd/devplumb"), name: n.name, driver: drvDriver,
		network: "impl-net-" + cniRandom(), pr: &podresourcestest.Server{Socket: filepath.Join(n.dir, "pod-resources", "kubelet.sock")}}
	conf := cn.conf(map[string]any{"resourceName": implicit, "deviceInfoDir": n.devinfoDir, "delegate": map[string]any{"type": "host-device"}})
	extAttachments(t, cn, conf, pod, conf, veths, claim)
	simCLI(t, sim, "pod", "del", "--root", n.dir, "--namespace", cniNS, "--name", name)
}

// TestNodesimExtendedResourcesInitContainersAndRequests: nodesim, with the real API server,
// for a pod with an init container and a sidecar asking an extended resource backed by
// DRA, and containers naming one request of a pod claim each:
//   - the Pod object has them as written (init containers, the sidecar's restartPolicy,
//     resources.claims with request);
//   - the scheduler's claim has one request, container-2-request-0 of app's two devices,
//     which the init container reuses (it runs before app): the status maps both to it;
//   - PodResources reports the sidecar first, then app, not the init container; a
//     container naming one request of a claim gets the whole claim; app also gets the
//     scheduler's claim.
func TestNodesimExtendedResourcesInitContainersAndRequests(t *testing.T) {
	node := "initreq-" + cniRandom()
	root, n := simNode(t, node)
	d := simStartDriver(t, root, node, "ir-"+cniRandom()+".example.com", []string{"dev0", "dev1", "dev2", "dev3"})
	e2etest.Must(t, n.WaitDRADriver(e2etest.Ctx(t), d.name))
	ns := simNamespace(t, "nodesim-initreq")
	ext := "example.com/ir-" + cniRandom()
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "ir-" + cniRandom()}, Spec: resourceapi.DeviceClassSpec{
		ExtendedResourceName: &ext, Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", d.name)}}}}}
	_, err := srv.Client.ResourceV1().DeviceClasses().Create(e2etest.Ctx(t), class, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() {
		_ = srv.Client.ResourceV1().DeviceClasses().Delete(e2etest.Ctx(t), class.Name, metav1.DeleteOptions{})
	})
	needExtendedResources(t, class.Name)
	spec := simClaimSpec(class.Name, 1)
	spec.Devices.Requests = append(spec.Devices.Requests, spec.Devices.Requests[0])
	spec.Devices.Requests[0].Name, spec.Devices.Requests[1].Name = "a", "b"
	_, err = srv.Client.ResourceV1().ResourceClaimTemplates(ns).Create(e2etest.Ctx(t), &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "two"}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}, metav1.CreateOptions{})
	e2etest.Must(t, err)

	p, err := n.AddPod(e2etest.Ctx(t), kubeletsim.PodSpec{Namespace: ns, Name: "web",
		Claims: []kubeletsim.PodClaim{{Name: "net", ResourceClaimTemplateName: "two"}},
		Containers: []kubeletsim.ContainerSpec{
			{Name: "setup", Init: true, Requests: []kubeletsim.ResourceRequest{{Resource: ext, Count: 1}}},
			{Name: "proxy", Init: true, Sidecar: true, Claims: []string{"net/b"}},
			{Name: "app", Claims: []string{"net/a"}, Requests: []kubeletsim.ResourceRequest{{Resource: ext, Count: 2}}},
		}})
	e2etest.Must(t, err)
	pod, ok := simGetPod(t, ns, "web")
	if !ok || len(pod.Spec.InitContainers) != 2 || pod.Spec.InitContainers[1].RestartPolicy == nil ||
		len(pod.Spec.Containers) != 1 || !slices.Equal(pod.Spec.Containers[0].Resources.Claims, []corev1.ResourceClaim{{Name: "net", Request: "a"}}) {
		t.Fatalf("Pod object: %+v", pod.Spec)
	}
	want := []corev1.ContainerExtendedResourceRequest{{ContainerName: "app", ResourceName: ext, RequestName: "container-2-request-0"},
		{ContainerName: "setup", ResourceName: ext, RequestName: "container-2-request-0"}}
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil || !slices.Equal(st.RequestMappings, want) {
		t.Fatalf("status.extendedResourceClaimStatus %+v, want mappings %+v", st, want)
	}
	extClaim := p.Claims[1]
	cl := simGetClaim(t, ns, extClaim.Name)
	if reqs := cl.Spec.Devices.Requests; len(reqs) != 1 || reqs[0].Name != "container-2-request-0" || reqs[0].Exactly.Count != 2 ||
		len(extClaim.Devices) != 2 || st.ResourceClaimName != extClaim.Name {
		t.Fatalf("claim %s: requests %+v, prepared %+v", cl.Name, reqs, extClaim.Devices)
	}
	pr, err := podresources.New(n.PodResourcesSocket())
	e2etest.Must(t, err)
	defer pr.Close()
	got, err := pr.Get(e2etest.Ctx(t), ns, "web")
	e2etest.Must(t, err)
	var report []string
	for _, c := range got.GetContainers() {
		var claims []string
		for _, dr := range c.GetDynamicResources() {
			claims = append(claims, fmt.Sprintf("%s:%d", dr.GetClaimName(), len(dr.GetClaimResources())))
		}
		report = append(report, c.GetName()+" "+fmt.Sprint(claims))
	}
	wantReport := []string{fmt.Sprintf("proxy [%s:2]", p.Claims[0].Name), fmt.Sprintf("app [%s:2 %s:2]", p.Claims[0].Name, extClaim.Name)}
	if !slices.Equal(report, wantReport) {
		t.Errorf("PodResources %q, want %q", report, wantReport)
	}
	e2etest.Must(t, n.DelPodContext(e2etest.Ctx(t), ns, "web"))
	if left := simClaimsIn(t, ns); len(left) != 0 {
		t.Errorf("claims left after pod del: %v", simClaimNames(left))
	}
}

// needExtendedResources skips the test on an API server that drops a DeviceClass's
// extendedResourceName (1.35, where the DRAExtendedResource gate is alpha and off).
func needExtendedResources(t *testing.T, class string) {
	t.Helper()
	dc, err := srv.Client.ResourceV1().DeviceClasses().Get(e2etest.Ctx(t), class, metav1.GetOptions{})
	e2etest.Must(t, err)
	if dc.Spec.ExtendedResourceName == nil {
		t.Skipf("the API server dropped DeviceClass %s's extendedResourceName: extended resources backed by DRA are off "+
			"(Kubernetes 1.35 without the DRAExtendedResource gate)", class)
	}
}
