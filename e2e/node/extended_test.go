package node_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cdispec"
)

// Issue 22: the migration from device plugin to DRA with nothing of the workload changed.
// One NetworkAttachmentDefinition (or one conflist) and one pod spec, asking
// resources.limits {example.com/hostdev: 2}, get the node's two hostdev devices first from
// netdev-dp as a device plugin, then, with deployments/dra/ applied (its DeviceClass has
// extendedResourceName example.com/hostdev), from netdev-dp as a DRA driver: the real
// scheduler makes the pod's claim and its status.extendedResourceClaimStatus, the real
// kubelet has netdev-dp prepare it and reports it only under PodResources
// dynamic_resources, and devplumb finds the devices there by the same resourceName.

// extNAD is the NAD both modes use: the shipped multus-delegation.yaml's, whose devplumb
// config also names the resource (what a DRA pod needs under Multus v4.3.0, which passes
// no device for it, with the kubeconfig of the installer's node config) and, for two
// attachments of one pod, no IPAM (a static address would be the same on both).
func extNAD(t *testing.T) string {
	t.Helper()
	return nadVariant(t, "netdev-net", "netdev-ext", func(conf map[string]any, annotations map[string]string) {
		conf["resourceName"] = annotations["k8s.v1.cni.cncf.io/resourceName"]
		conf["delegate"] = map[string]any{"type": "host-device"}
	})
}

// extPod creates the pod spec both modes run: one container asking for two hostdev
// devices, listing its links, with the annotation.
func extPod(t *testing.T, name string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	pod := createPodScript(t, name, map[string]string{draResource: "2"}, annotations, "env; "+linksScript)
	waitRunning(t, pod)
	p, err := nd.Client.CoreV1().Pods(pod.Namespace).Get(ctx(t), pod.Name, metav1.GetOptions{})
	e2etest.Must(t, err)
	return p
}

// TestExtendedResourceUnderMultus: Multus v4.3.0 thick; the pod attaches the NAD twice
// (net1, net2). With the device plugin Multus passes each attachment a device; in DRA
// mode it passes none and devplumb finds them in the kubelet's dynamic_resources. Both
// times net1 and net2 are the pod's two devices, Multus's network-status says so, and in
// DRA mode the claim's status.devices[].networkData too; deleting the pod gives the
// devices back and, in DRA mode, deletes and unprepares the claim.
func TestExtendedResourceUnderMultus(t *testing.T) {
	deployed(t)
	multusAsNodeCNI(t, multusThick)
	nad := extNAD(t)
	annotations := map[string]string{nadv1.NetworkAttachmentAnnot: nad + "@net1," + nad + "@net2"}
	ifNames := []string{"net1", "net2"}

	pod := extPod(t, "ext-multus-dp", annotations)
	devs := podDevices(t, pod, draResource)
	checkExtendedAttachments(t, pod, "default/"+nad, ifNames, devs, nil)
	deletePod(t, pod)

	needKube136(t, "the DRA half, an extended resource backed by DRA (KEP-5004)")
	draMode(t)
	waitAllocatable(t, map[string]string{draResource: "0"})
	pod = extPod(t, "ext-multus-dra", annotations)
	_, byID := extendedClaim(t, pod)
	checkExtendedAttachments(t, pod, "default/"+nad, ifNames, slices.Sorted(maps.Keys(byID)), byID)
	deletePod(t, pod)
	waitClaimsDeleted(t, mapValues(byID)[0])
	waitUnprepared(t, mapValues(byID)...)
	checkNoCNIFiles(t)
}

// TestExtendedResourceAlone: devplumb alone in the node's conflist with the config a
// device-plugin user has (resourceName); the runtime calls it once (eth0), which takes
// one of the pod's two devices, in both modes.
func TestExtendedResourceAlone(t *testing.T) {
	deployed(t)
	useConflist(t, "devplumb-ext", hostDeviceConflist("devplumb-ext", draResource, "192.0.2.40/24"))

	pod := extPod(t, "ext-alone-dp", nil)
	devs := podDevices(t, pod, draResource)
	checkExtendedAttachments(t, pod, "devplumb-ext", []string{"eth0"}, devs, nil)
	deletePod(t, pod)

	needKube136(t, "the DRA half, an extended resource backed by DRA (KEP-5004)")
	draMode(t)
	waitAllocatable(t, map[string]string{draResource: "0"})
	pod = extPod(t, "ext-alone-dra", nil)
	_, byID := extendedClaim(t, pod)
	checkExtendedAttachments(t, pod, "devplumb-ext", []string{"eth0"}, slices.Sorted(maps.Keys(byID)), byID)
	deletePod(t, pod)
	waitClaimsDeleted(t, mapValues(byID)[0])
	waitUnprepared(t, mapValues(byID)...)
	checkNoCNIFiles(t)
}

// extendedClaim checks what the real scheduler and kubelet did for the DRA-mode pod: the
// claim named in its status.extendedResourceClaimStatus (request container-0-request-0
// of container c) is the scheduler's, allocated two devices of netdev-dp on this node,
// reserved for the pod; PodResources reports it under dynamic_resources of c and nothing
// under devices. It returns the claim and its devices by device ID.
func extendedClaim(t *testing.T, pod *corev1.Pod) (*resourceapi.ResourceClaim, map[string]draDevice) {
	t.Helper()
	st := pod.Status.ExtendedResourceClaimStatus
	want := []corev1.ContainerExtendedResourceRequest{{ContainerName: "c", ResourceName: draResource, RequestName: "container-0-request-0"}}
	if st == nil || !slices.Equal(st.RequestMappings, want) {
		t.Fatalf("pod %s: status.extendedResourceClaimStatus %+v, want mappings %+v", pod.Name, st, want)
	}
	cl, err := nd.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx(t), st.ResourceClaimName, metav1.GetOptions{})
	e2etest.Must(t, err)
	t.Logf("claim %s: annotations %v, requests %+v, allocation %+v", cl.Name, cl.Annotations, cl.Spec.Devices.Requests, cl.Status.Allocation)
	if cl.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" || cl.Status.Allocation == nil ||
		len(cl.Status.Allocation.Devices.Results) != 2 || !slices.ContainsFunc(cl.Status.ReservedFor,
		func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod.UID }) {
		t.Fatalf("claim %s is not the scheduler's, allocated two devices, reserved for pod %s", cl.Name, pod.Name)
	}
	byID := map[string]draDevice{}
	var wantDR []string
	for _, r := range cl.Status.Allocation.Devices.Results {
		sd := sliceDeviceByName(t, r.Pool, r.Device)
		d := draDevice{claim: cl, resource: draResource, pool: r.Pool, name: r.Device, id: sd.str("k8s.cni.cncf.io/deviceID")}
		if r.Driver != draDriver || r.Request != "container-0-request-0" || sd.str("k8s.cni.cncf.io/resourceName") != draResource {
			t.Errorf("claim %s: device %+v of slice device %+v", cl.Name, r, sd.attrs)
		}
		byID[d.id] = d
		wantDR = append(wantDR, fmt.Sprintf("c: default/%s %s/%s/%s", cl.Name, r.Driver, r.Pool, r.Device))
	}
	get, _ := podResources(t, pod)
	var gotDR []string
	for _, s := range dynamicResources(get) {
		gotDR = append(gotDR, s[:strings.LastIndex(s, " [")]) // CDI devices: see dradevice.OwnCDIDevices
	}
	t.Logf("PodResources dynamic_resources: %q", dynamicResources(get))
	if !slices.Equal(gotDR, wantDR) || len(get.GetContainers()[0].GetDevices()) != 0 {
		t.Errorf("PodResources: dynamic_resources %q, devices %v; want %q and no devices", gotDR, get.GetContainers()[0].GetDevices(), wantDR)
	}
	return cl, byID
}

// checkExtendedAttachments: each interface of the pod is one of its devices, no device
// twice, and the network's network-status entry for it says so; for DRA devices (byID),
// the claim's status.devices[] entry of the device names the interface and its MAC.
func checkExtendedAttachments(t *testing.T, pod *corev1.Pod, network string, ifNames, devs []string, byID map[string]draDevice) {
	t.Helper()
	if len(devs) != 2 {
		t.Fatalf("pod %s has devices %v, want two", pod.Name, devs)
	}
	v := podView(t, pod)
	var used []string
	for _, ifName := range ifNames {
		dev := v.aliases[ifName]
		if !slices.Contains(devs, dev) || slices.Contains(used, dev) {
			t.Errorf("pod %s's %s is host device %q; the pod's devices are %v, taken already %v", pod.Name, ifName, dev, devs, used)
			continue
		}
		used = append(used, dev)
		entry := networkStatus(t, pod, network, ifName)
		d, ok := byID[dev]
		if !ok {
			continue
		}
		cl, err := nd.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx(t), d.claim.Name, metav1.GetOptions{})
		e2etest.Must(t, err)
		if e := devplumbEntry(cl, d); e == nil || e.NetworkData == nil || e.NetworkData.InterfaceName != ifName ||
			e.NetworkData.HardwareAddress == "" || e.NetworkData.HardwareAddress != entry.Mac {
			t.Errorf("claim %s: status.devices entry of %s %+v, want interface %s, MAC %s", cl.Name, dev, e, ifName, entry.Mac)
		}
	}
	waitFor(t, "the devices in the container", func(context.Context) error {
		for _, dev := range devs {
			if log := podLog(t, pod); !strings.Contains(log, cdispec.EnvName(draResource, dev)+"=") {
				return fmt.Errorf("no CDI variable of %s in the container's output", dev)
			}
		}
		return nil
	})
}

func mapValues(m map[string]draDevice) []draDevice {
	var out []draDevice
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[k])
	}
	return out
}
