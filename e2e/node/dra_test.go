package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/node"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources"
)

// What deployments/dra/ ships: netdev-dp's DRA driver and the DeviceClass of the
// example.com/hostdev resource (the veth ends ens2f0 and ens2f1 here, see deploy).
const (
	draDriver   = "netdev.devplumb.io"
	draClass    = "hostdev.example.com"
	draResource = "example.com/hostdev"
	draDS       = "netdev-dp-dra"
)

// draManifests are deployments/dra/'s files, as a user applies them (node-policy.yaml: the
// driver writes only its own node's ResourceSlices).
func draManifests() []string {
	dir := filepath.Join(testenv.ModuleRoot(), "deployments", "dra")
	return []string{filepath.Join(dir, "netdev-dp-dra.yaml"), filepath.Join(dir, "deviceclasses.yaml"),
		filepath.Join(dir, "node-policy.yaml")}
}

// draMode replaces, until the test ends, the device-plugin netdev-dp with netdev-dp in DRA
// mode as deployments/dra/ ships it (the two must not run side by side: both would serve
// the same devices), and waits until the driver published the node's devices. At the end
// the DRA objects go and the device-plugin DaemonSet is back, its resources allocatable.
func draMode(t *testing.T) {
	t.Helper()
	deployed(t)
	dpDS := filepath.Join(testenv.ModuleRoot(), "deployments", "netdev-dp-daemonset.yaml")
	stopDaemonSet(t, "netdev-dp")
	t.Cleanup(func() {
		stopDaemonSet(t, draDS)
		c := context.Background()
		e2etest.Must(t, nd.Delete(c, draManifests()...))
		e2etest.Must(t, nd.Client.ResourceV1().ResourceSlices().DeleteCollection(c, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.driver=" + draDriver}))
		e2etest.Must(t, nd.Apply(c, dpDS))
		waitDaemonSet(t, "kube-system", "netdev-dp")
		waitAllocatable(t, map[string]string{draResource: "2"})
	})
	e2etest.Must(t, nd.Apply(ctx(t), draManifests()...))
	waitDaemonSet(t, "kube-system", draDS)
	waitFor(t, "the driver's ResourceSlice with ens2f0 and ens2f1", func(c context.Context) error {
		for _, id := range []string{"ens2f0", "ens2f1"} {
			if _, err := sliceDeviceByID(c, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// stopDaemonSet deletes the kube-system DaemonSet and waits until its pods are gone.
func stopDaemonSet(t *testing.T, name string) {
	t.Helper()
	err := nd.Client.AppsV1().DaemonSets("kube-system").Delete(ctx(t), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitFor(t, "DaemonSet "+name+"'s pods gone", func(c context.Context) error {
		ps, err := nd.Client.CoreV1().Pods("kube-system").List(c, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		if err != nil {
			return err
		}
		if len(ps.Items) > 0 {
			return fmt.Errorf("pods: %s", podStates(c, "kube-system"))
		}
		return nil
	})
}

// sliceDevice is one device of the driver's ResourceSlices on the node.
type sliceDevice struct {
	pool, name string
	attrs      map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
}

func (d sliceDevice) str(name resourceapi.QualifiedName) string {
	if a, ok := d.attrs[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// sliceDevices are the driver's devices on the node, as its ResourceSlices publish them.
func sliceDevices(c context.Context) ([]sliceDevice, error) {
	list, err := nd.Client.ResourceV1().ResourceSlices().List(c, metav1.ListOptions{
		FieldSelector: "spec.driver=" + draDriver + ",spec.nodeName=" + node.Name})
	if err != nil {
		return nil, err
	}
	var out []sliceDevice
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			out = append(out, sliceDevice{pool: s.Spec.Pool.Name, name: d.Name, attrs: d.Attributes})
		}
	}
	return out, nil
}

// sliceDeviceByID finds a published device by its k8s.cni.cncf.io/deviceID attribute.
func sliceDeviceByID(c context.Context, id string) (sliceDevice, error) {
	devs, err := sliceDevices(c)
	if err != nil {
		return sliceDevice{}, err
	}
	for _, d := range devs {
		if d.str("k8s.cni.cncf.io/deviceID") == id {
			return d, nil
		}
	}
	return sliceDevice{}, fmt.Errorf("no device with deviceID %s in the driver's slices (%d devices)", id, len(devs))
}

// sliceDeviceByName finds a published device by pool and name.
func sliceDeviceByName(t *testing.T, pool, name string) sliceDevice {
	t.Helper()
	devs, err := sliceDevices(ctx(t))
	e2etest.Must(t, err)
	for _, d := range devs {
		if d.pool == pool && d.name == name {
			return d
		}
	}
	t.Fatalf("device %s/%s is not in the driver's slices", pool, name)
	return sliceDevice{}
}

// claimTemplate creates a ResourceClaimTemplate in default asking for one device of class.
func claimTemplate(t *testing.T, name, class string) string {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}},
		}},
	}
	tc := nd.Client.ResourceV1().ResourceClaimTemplates("default")
	_, err := tc.Create(ctx(t), tmpl, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { e2etest.Must(t, tc.Delete(context.Background(), name, metav1.DeleteOptions{})) })
	return name
}

// createClaimPod creates a busybox pod with the pod claim "net" made from template; its
// container references the claim when byContainer, else the claim is the pod's alone (a
// network-only claim, for a CNI plugin and no container).
func createClaimPod(t *testing.T, name, template string, byContainer bool, annotations map[string]string) *corev1.Pod {
	t.Helper()
	one := int64(1)
	ctr := corev1.Container{Name: "c", Image: node.BusyboxImage, ImagePullPolicy: corev1.PullNever,
		Command: []string{"sh", "-c", "env; " + linksScript}}
	if byContainer {
		ctr.Resources.Claims = []corev1.ResourceClaim{{Name: "net"}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &one,
			Containers:                    []corev1.Container{ctr},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "net", ResourceClaimTemplateName: &template}},
		},
	}
	out, err := nd.Client.CoreV1().Pods("default").Create(ctx(t), pod, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { deletePod(t, out) })
	return out
}

// podClaim is the ResourceClaim of the pod's claim "net": the one it names, or the one
// made from its template (the pod's status names that one).
func podClaim(t *testing.T, pod *corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	p, err := nd.Client.CoreV1().Pods(pod.Namespace).Get(ctx(t), pod.Name, metav1.GetOptions{})
	e2etest.Must(t, err)
	var name *string
	for _, c := range p.Spec.ResourceClaims {
		if c.Name == "net" {
			name = c.ResourceClaimName
		}
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.Name == "net" && name == nil {
			name = s.ResourceClaimName
		}
	}
	if name == nil {
		t.Fatalf("pod %s: no ResourceClaim for its claim net (status %+v)", pod.Name, p.Status.ResourceClaimStatuses)
	}
	cl, err := nd.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx(t), *name, metav1.GetOptions{})
	e2etest.Must(t, err)
	return cl
}

// draDevice is the device a claim was allocated and prepared, as the API server says.
type draDevice struct {
	claim    *resourceapi.ResourceClaim
	resource string // its resourceName attribute
	pool     string
	name, id string // slice device name, and its deviceID attribute
}

// cdiName is the device's CDI name as the driver answers it to the kubelet.
func (d draDevice) cdiName() string { return d.resource + "=" + cdispec.DeviceName(d.id) }

// allocated checks that the scheduler allocated the pod's claim one device of the driver
// and resource on this node and that it is reserved for the pod, and returns that device.
func allocated(t *testing.T, pod *corev1.Pod, resource string) draDevice {
	t.Helper()
	cl := podClaim(t, pod)
	a := cl.Status.Allocation
	if a == nil || len(a.Devices.Results) != 1 {
		t.Fatalf("claim %s of pod %s: allocation %+v, want one device", cl.Name, pod.Name, a)
	}
	r := a.Devices.Results[0]
	if r.Driver != draDriver || r.Pool != node.Name {
		t.Errorf("claim %s: device %s/%s/%s, want driver %s, pool %s", cl.Name, r.Driver, r.Pool, r.Device, draDriver, node.Name)
	}
	if !slices.ContainsFunc(cl.Status.ReservedFor, func(ref resourceapi.ResourceClaimConsumerReference) bool {
		return ref.UID == pod.UID
	}) {
		t.Errorf("claim %s is not reserved for pod %s: %+v", cl.Name, pod.Name, cl.Status.ReservedFor)
	}
	sd := sliceDeviceByName(t, r.Pool, r.Device)
	if got := sd.str("k8s.cni.cncf.io/resourceName"); got != resource {
		t.Errorf("device %s: resourceName attribute %q, want %s", r.Device, got, resource)
	}
	return draDevice{claim: cl, resource: resource, pool: r.Pool, name: r.Device, id: sd.str("k8s.cni.cncf.io/deviceID")}
}

// cdiSpecDevices are the device names in the driver's CDI spec of the resource: the
// driver writes there exactly the devices of prepared claims (none: no file).
func cdiSpecDevices(t *testing.T, resource string) []string {
	t.Helper()
	w, err := cdispec.New(nd.HostPath("/run/cdi"), resource)
	e2etest.Must(t, err)
	data, err := os.ReadFile(w.Path())
	if os.IsNotExist(err) {
		return nil
	}
	e2etest.Must(t, err)
	var spec cdispecs.Spec
	e2etest.Must(t, json.Unmarshal(data, &spec))
	var out []string
	for _, d := range spec.Devices {
		out = append(out, d.Name)
	}
	return out
}

// podResources is what the kubelet's PodResources API reports for the pod, through Get
// and through List.
func podResources(t *testing.T, pod *corev1.Pod) (get, list *podresourcesv1.PodResources) {
	t.Helper()
	cl, err := podresources.New(nd.HostPath("/var/lib/kubelet/pod-resources/kubelet.sock"))
	e2etest.Must(t, err)
	defer cl.Close()
	get, err = cl.Get(ctx(t), pod.Namespace, pod.Name)
	e2etest.Must(t, err)
	all, err := cl.List(ctx(t))
	e2etest.Must(t, err)
	for _, p := range all {
		if p.GetNamespace() == pod.Namespace && p.GetName() == pod.Name {
			return get, p
		}
	}
	t.Fatalf("pod %s not in PodResources List", pod.Name)
	return nil, nil
}

// dynamicResources is a pod's dynamic_resources, per container, in a form to compare:
// "container: claim-namespace/claim-name driver/pool/device [cdi...]".
func dynamicResources(p *podresourcesv1.PodResources) []string {
	var out []string
	for _, c := range p.GetContainers() {
		for _, dr := range c.GetDynamicResources() {
			for _, r := range dr.GetClaimResources() {
				var cdi []string
				for _, d := range r.GetCdiDevices() {
					cdi = append(cdi, d.GetName())
				}
				out = append(out, fmt.Sprintf("%s: %s/%s %s/%s/%s %v", c.GetName(), dr.GetClaimNamespace(), dr.GetClaimName(),
					r.GetDriverName(), r.GetPoolName(), r.GetDeviceName(), cdi))
			}
		}
	}
	return out
}

// TestDRAClaimsOnTheRealKubelet: netdev-dp in DRA mode, deployed from deployments/dra/,
// publishes the node's devices; the real kube-controller-manager makes a pod's claim from
// a ResourceClaimTemplate, the real kube-scheduler allocates it, and the real kubelet
// prepares it through the driver, both for a claim the pod's container references and
// for a network-only claim no container references. containerd injects the CDI device
// into the container that references its claim. What PodResources (Get and List) reports
// in dynamic_resources: the referenced claim, under that container; the network-only
// claim not at all, since the kubelet reports claims per container (devplumb must find
// such a claim through the API server). Deleting the pods unprepares both claims.
func TestDRAClaimsOnTheRealKubelet(t *testing.T) {
	draMode(t)
	newScrapers(t).check(t, draMetrics, "netdev_dp_") // as the device plugin's (metrics_test.go)
	tmpl := claimTemplate(t, "hostdev", draClass)
	used := createClaimPod(t, "dra-used", tmpl, true, nil)
	netOnly := createClaimPod(t, "dra-netonly", tmpl, false, nil)
	waitRunning(t, used)
	waitRunning(t, netOnly)
	du, dn := allocated(t, used, draResource), allocated(t, netOnly, draResource)
	if du.id == dn.id {
		t.Fatalf("both claims got device %s", du.id)
	}
	// Prepared: the driver wrote both devices into its CDI spec (it does so in
	// NodePrepareResources, for prepared claims only).
	if got := cdiSpecDevices(t, draResource); !slices.Contains(got, cdispec.DeviceName(du.id)) || !slices.Contains(got, cdispec.DeviceName(dn.id)) {
		t.Errorf("CDI spec devices %v: want both prepared devices %s and %s", got, du.id, dn.id)
	}
	cdiEnv := cdispec.EnvName(draResource, du.id) + "="
	waitFor(t, "the claim's CDI device in the container", func(context.Context) error {
		if log := podLog(t, used); !strings.Contains(log, cdiEnv) {
			return fmt.Errorf("container output has no %s:\n%s", cdiEnv, log)
		}
		return nil
	})
	if log := podLog(t, netOnly); strings.Contains(log, cdispec.EnvName(draResource, dn.id)+"=") {
		t.Errorf("pod %s's container, which references no claim, got the claim's CDI device:\n%s", netOnly.Name, log)
	}

	// The second CDI device mounts the request's device metadata (KEP-5304, metadata_test.go).
	want := fmt.Sprintf("c: default/%s %s/%s/%s [%s %s/metadata=%s_dev]", du.claim.Name, draDriver, du.pool, du.name, du.cdiName(), draDriver, du.claim.UID)
	get, list := podResources(t, used)
	t.Logf("PodResources Get, pod %s: dynamic_resources %q", used.Name, dynamicResources(get))
	for how, p := range map[string]*podresourcesv1.PodResources{"Get": get, "List": list} {
		if got := dynamicResources(p); !slices.Equal(got, []string{want}) {
			t.Errorf("PodResources %s, pod %s (container references its claim): dynamic_resources %q, want %q", how, used.Name, got, want)
		}
	}
	get, list = podResources(t, netOnly)
	for how, p := range map[string]*podresourcesv1.PodResources{"Get": get, "List": list} {
		if got := dynamicResources(p); len(got) > 0 {
			t.Errorf("PodResources %s, pod %s (network-only claim %s): dynamic_resources %q, want none", how, netOnly.Name, dn.claim.Name, got)
		}
	}

	deletePod(t, used)
	deletePod(t, netOnly)
	checkClaimsGone(t, du, dn)
}

// checkClaimsGone: the pods' claims are deleted with their pods and unprepared.
func checkClaimsGone(t *testing.T, devs ...draDevice) {
	t.Helper()
	waitClaimsDeleted(t, devs...)
	waitUnprepared(t, devs...)
}

// waitClaimsDeleted waits until the devices' claims are gone from the API server.
func waitClaimsDeleted(t *testing.T, devs ...draDevice) {
	t.Helper()
	for _, d := range devs {
		waitFor(t, "claim "+d.claim.Name+" deleted", func(c context.Context) error {
			_, err := nd.Client.ResourceV1().ResourceClaims("default").Get(c, d.claim.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there: %v", err)
		})
	}
}

// waitUnprepared waits until the devices are out of the driver's CDI spec, and checks
// that no claim checkpoint of the driver is left.
func waitUnprepared(t *testing.T, devs ...draDevice) {
	t.Helper()
	waitFor(t, "the claims unprepared", func(context.Context) error {
		for _, d := range devs {
			if slices.Contains(cdiSpecDevices(t, d.resource), cdispec.DeviceName(d.id)) {
				return fmt.Errorf("%s still in the CDI spec", d.id)
			}
		}
		return nil
	})
	if left := testenv.Files(t, nd.HostPath("/var/lib/kubelet/plugins/"+draDriver+"/claims")); len(left) > 0 {
		t.Errorf("the driver's claim checkpoints left: %v", left)
	}
}

// needKube136 skips the test (or what is left of it) on a node older than Kubernetes
// 1.36, where what it needs is alpha and off: 1.35 drops a device's taints and
// allowMultipleAllocations, its kubelet reports no device health, and its scheduler
// does not serve an extended resource from DRA (DRAExtendedResource).
func needKube136(t *testing.T, what string) {
	t.Helper()
	if !e2etest.ServerAtLeast(t, nd.Client.Discovery(), 1, 36) {
		t.Skipf("%s: off before Kubernetes 1.36 (alpha gates)", what)
	}
}
