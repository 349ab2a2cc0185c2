package dra_test

// devplumb's side of DRA against the real kube-apiserver: the test plays the
// driver (a ResourceSlice), the scheduler (the claim's allocation and
// reservedFor) and the kubelet (a PodResources server that reports the
// claim, or not); devplumb is the real binary with host-device as its
// delegate, moving a veth end into a real network namespace.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/cni/dradevice"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

const (
	cniResource = "example.com/hostdev"
	cniNS       = "default"
)

// cniNode is one test's node: its name (the ResourceSlices' spec.nodeName),
// a driver of its own, a PodResources server, a device-info dir and state.
type cniNode struct {
	t       *testing.T
	dir     string
	bin     string
	name    string // node name, unique per test
	driver  string
	class   string
	network string
	pr      *podresourcestest.Server
	info    *nadv1.DeviceInfo
}

func newCNINode(t *testing.T) *cniNode {
	t.Helper()
	testenv.CNIPlugins(t)
	suffix := cniRandom()
	n := &cniNode{t: t, dir: t.TempDir(), bin: testenv.Build(t, "./cmd/devplumb"), pr: podresourcestest.NewServer(t),
		name: "cni-node-" + suffix, driver: "cni-" + suffix + ".devplumb.io", class: "cni-" + suffix, network: "net-" + suffix}
	n.info = &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypePCI, Version: nadv1.DeviceInfoVersion,
		Pci: &nadv1.PciDevice{PciAddress: "0000:3b:02.1", PfPciAddress: "0000:3b:00.0"}}
	e2etest.Must(t, os.MkdirAll(filepath.Join(n.dir, "devinfo", "dp"), 0o755))
	class := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: n.class},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: `device.driver == "` + n.driver + `"`}}}}}
	_, err := srv.Client.ResourceV1().DeviceClasses().Create(e2etest.Ctx(t), class, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() {
		_ = srv.Client.ResourceV1().DeviceClasses().Delete(e2etest.Ctx(t), n.class, metav1.DeleteOptions{})
	})
	return n
}

func cniRandom() string {
	return testenv.UniqueName("")
}

// veth makes a veth pair; its first end is the device host-device moves.
// It writes the device plugin's (the driver's) device-info file for it.
func (n *cniNode) veth() string {
	n.t.Helper()
	name := testenv.VethPair(n.t, "dra") + "a"
	raw, _ := json.Marshal(n.info)
	e2etest.Must(n.t, os.WriteFile(filepath.Join(n.dir, "devinfo", "dp", "example.com-hostdev-"+name+"-device.json"), raw, 0o644))
	return name
}

// claimAttempt is an ADD of net1 for a one-device pod's claim "net" (dev its
// device), as the claim-status permission tests make it.
type claimAttempt struct {
	dev, claim, netns string
	pod               *corev1.Pod
	conf              map[string]any
	res               e2etest.CNIResult
}

// claimADD runs that ADD with the kubeconfig kc, in a new netns.
func (n *cniNode) claimADD(kc string) *claimAttempt {
	n.t.Helper()
	a := &claimAttempt{netns: testenv.NetNS(n.t).Path()}
	a.dev, a.pod, a.claim = n.oneDevicePod(false)
	a.conf = n.conf(map[string]any{"resourceClaim": "net", "kubeconfig": kc})
	a.res = n.run("ADD", a.conf, a.netns, a.pod, "net1")
	return a
}

// oneDevicePod publishes a veth as the slice's one device, dev-0, and makes a pod whose
// claim "net" (from a template, owned by the pod, when template) is allocated dev-0 and
// reserved for the pod. It returns the veth, the pod and the claim's name.
func (n *cniNode) oneDevicePod(template bool) (dev string, pod *corev1.Pod, claimName string) {
	n.t.Helper()
	dev = n.veth()
	n.slice(cniDev{"dev-0", attrs(dev, cniResource)})
	claimName = "claim-" + cniRandom()
	pod = n.pod("pod-"+cniRandom(), claimName, template)
	var owner *corev1.Pod
	if template {
		owner = pod
	}
	n.claim(claimName, owner, []*corev1.Pod{pod}, "dev-0")
	return dev, pod, claimName
}

// devplumbKubeconfig writes a kubeconfig of devplumb's service account (its RBAC is what
// the test grants) as the installer writes it on this node: with the token of the
// devplumb DaemonSet's pod on the node (podBoundToken). It returns its path.
func (n *cniNode) devplumbKubeconfig() string {
	n.t.Helper()
	return writeKubeconfig(n.t, filepath.Join(n.dir, "devplumb.kubeconfig"), podBoundToken(n.t, "devplumb-daemonset.yaml", n.name))
}

func writeKubeconfig(t *testing.T, path, token string) string {
	t.Helper()
	e2etest.Must(t, os.WriteFile(path, []byte(kubeapi.Kubeconfig(srv.URL, token)), 0o600))
	return path
}

// nodeSelector selects exactly the node, as the allocator writes it.
func nodeSelector(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
}

// cniDev is one device in the node's ResourceSlice: its name there and the
// attributes it carries (the deviceID attribute is the veth).
type cniDev struct {
	name  string
	attrs map[string]string
}

// slice publishes the node's ResourceSlice, as the driver would.
func (n *cniNode) slice(devs ...cniDev) {
	n.t.Helper()
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: n.name + "-" + n.class},
		Spec: resourcev1.ResourceSliceSpec{Driver: n.driver, NodeName: &n.name,
			Pool: resourcev1.ResourcePool{Name: n.name, Generation: 1, ResourceSliceCount: 1}}}
	for _, d := range devs {
		dev := resourcev1.Device{Name: d.name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}}
		for k, v := range d.attrs {
			dev.Attributes[resourcev1.QualifiedName(k)] = resourcev1.DeviceAttribute{StringValue: &v}
		}
		s.Spec.Devices = append(s.Spec.Devices, dev)
	}
	_, err := srv.Client.ResourceV1().ResourceSlices().Create(e2etest.Ctx(n.t), s, metav1.CreateOptions{})
	e2etest.Must(n.t, err)
	n.t.Cleanup(func() {
		_ = srv.Client.ResourceV1().ResourceSlices().Delete(e2etest.Ctx(n.t), s.Name, metav1.DeleteOptions{})
	})
}

// attrs are a device's two k8s.cni.cncf.io attributes.
func attrs(id, res string) map[string]string {
	m := map[string]string{}
	if id != "" {
		m[dradevice.AttrDeviceID] = id
	}
	if res != "" {
		m[dradevice.AttrResourceName] = res
	}
	return m
}

// pod creates a pod on the node whose spec claim "net" is the
// ResourceClaim claimName (resourceClaimName), or, with template set, one
// made from a template (named in status.resourceClaimStatuses).
func (n *cniNode) pod(name, claimName string, template bool) *corev1.Pod {
	n.t.Helper()
	return n.podOn(n.name, name, claimName, template)
}

// podOn is pod with node as its nodeName: "" makes a pod the scheduler has
// not bound yet.
func (n *cniNode) podOn(node, name, claimName string, template bool) *corev1.Pod {
	n.t.Helper()
	e2etest.Must(n.t, srv.DeletePod(e2etest.Ctx(n.t), cniNS, name))
	pc := corev1.PodResourceClaim{Name: "net", ResourceClaimName: &claimName}
	if template {
		tmpl := "net-template"
		pc = corev1.PodResourceClaim{Name: "net", ResourceClaimTemplateName: &tmpl}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cniNS, Name: name},
		Spec: corev1.PodSpec{NodeName: node, ResourceClaims: []corev1.PodResourceClaim{pc},
			Containers: []corev1.Container{{Name: "c", Image: "busybox", ImagePullPolicy: corev1.PullNever}}}}
	out, err := srv.Client.CoreV1().Pods(cniNS).Create(e2etest.Ctx(n.t), pod, metav1.CreateOptions{})
	e2etest.Must(n.t, err)
	// The kubelet knows every pod it runs, with or without devices.
	n.pr.SetPod(&v1.PodResources{Namespace: cniNS, Name: name, Containers: []*v1.ContainerResources{{Name: "c"}}})
	if template {
		out.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "net", ResourceClaimName: &claimName}}
		out, err = srv.Client.CoreV1().Pods(cniNS).UpdateStatus(e2etest.Ctx(n.t), out, metav1.UpdateOptions{})
		e2etest.Must(n.t, err)
	}
	return out
}

// claim creates the ResourceClaim, owned by owner when it is made from a
// template; with devices it is allocated them (request "net") and reserved
// for the pods, as the scheduler does.
func (n *cniNode) claim(name string, owner *corev1.Pod, reservedFor []*corev1.Pod, devices ...string) *resourcev1.ResourceClaim {
	n.t.Helper()
	rc := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: cniNS, Name: name},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "net",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: n.class, AllocationMode: resourcev1.DeviceAllocationModeExactCount,
				Count: int64(max(1, len(devices)))}}}}}}
	if owner != nil {
		yes := true
		rc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID, Controller: &yes}}
	}
	claims := srv.Client.ResourceV1().ResourceClaims(cniNS)
	if err := claims.Delete(e2etest.Ctx(n.t), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		n.t.Fatal(err)
	}
	out, err := claims.Create(e2etest.Ctx(n.t), rc, metav1.CreateOptions{})
	e2etest.Must(n.t, err)
	if len(devices) == 0 {
		return out
	}
	// The node selector the scheduler's allocator writes for a device of a node-local
	// pool: the API server (1.36+) finds the claim's node in it when it authorizes
	// devplumb's status write ("associated-node").
	alloc := &resourcev1.AllocationResult{NodeSelector: nodeSelector(n.name)}
	for _, d := range devices {
		alloc.Devices.Results = append(alloc.Devices.Results, resourcev1.DeviceRequestAllocationResult{
			Request: "net", Driver: n.driver, Pool: n.name, Device: d})
	}
	out.Status.Allocation = alloc
	for _, p := range reservedFor {
		out.Status.ReservedFor = append(out.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{
			Resource: "pods", Name: p.Name, UID: p.UID})
	}
	out, err = claims.UpdateStatus(e2etest.Ctx(n.t), out, metav1.UpdateOptions{})
	e2etest.Must(n.t, err)
	return out
}

// report makes the PodResources server report the claim's devices for the
// pod's container, each with the CDI device the driver prepared
// (example.com/hostdev=<ID>); cdi[i] "" reports the device without one.
func (n *cniNode) report(pod *corev1.Pod, claim string, devices, cdi []string) {
	var crs []*v1.ClaimResource
	for i, d := range devices {
		var names []string
		if cdi[i] != "" {
			names = []string{cniResource + "=" + cdi[i]}
		}
		crs = append(crs, podresourcestest.Device(n.driver, n.name, d, names...))
	}
	n.pr.SetPod(&v1.PodResources{Namespace: cniNS, Name: pod.Name, Containers: []*v1.ContainerResources{{
		Name: "c", DynamicResources: []*v1.DynamicResource{podresourcestest.Claim(cniNS, claim, crs...)}}}})
}

// conf is the network config; extra keys override.
func (n *cniNode) conf(extra map[string]any) map[string]any {
	return e2etest.HostDeviceConf(n.network, n.pr.Socket, n.dir, srv.Kubeconfig, extra)
}

// run runs the devplumb binary as a container runtime would, for pod.
func (n *cniNode) run(cmd string, conf map[string]any, netns string, pod *corev1.Pod, ifName string) e2etest.CNIResult {
	n.t.Helper()
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + cniNS + ";K8S_POD_NAME=" + pod.Name + ";K8S_POD_UID=" + string(pod.UID)
	return e2etest.RunDevplumb(n.t, n.bin, e2etest.CNICall{Command: cmd, ContainerID: "c-" + pod.Name, NetNS: netns,
		IfName: ifName, Args: args, Conf: conf})
}

// deviceStatus is the claim's status.devices[] entry of device, or nil.
func deviceStatus(t *testing.T, claim, driver, device string) *resourcev1.AllocatedDeviceStatus {
	t.Helper()
	rc, err := srv.Client.ResourceV1().ResourceClaims(cniNS).Get(e2etest.Ctx(t), claim, metav1.GetOptions{})
	e2etest.Must(t, err)
	for i, d := range rc.Status.Devices {
		if d.Driver == driver && d.Device == device {
			return &rc.Status.Devices[i]
		}
	}
	return nil
}

// onHost tells whether the link is in the host's network namespace.
func onHost(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}
