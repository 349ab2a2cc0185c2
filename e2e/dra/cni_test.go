package dra_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// driverEntry is what the driver wrote in the device's status entry before
// devplumb ran (a second field manager's fields in the same entry).
func (n *cniNode) driverEntry(claim, device string) {
	n.t.Helper()
	cond := metav1ac.Condition().WithType("Prepared").WithStatus(metav1.ConditionTrue).WithReason("Prepared").
		WithMessage("prepared by the driver").WithLastTransitionTime(metav1.Now())
	ac := resourceac.ResourceClaim(claim, cniNS).WithStatus(resourceac.ResourceClaimStatus().WithDevices(
		resourceac.AllocatedDeviceStatus().WithDriver(n.driver).WithPool(n.name).WithDevice(device).WithConditions(cond)))
	_, err := srv.Client.ResourceV1().ResourceClaims(cniNS).ApplyStatus(e2etest.Ctx(n.t), ac,
		metav1.ApplyOptions{FieldManager: "test-driver", Force: true})
	e2etest.Must(n.t, err)
}

func condition(s *resourcev1.AllocatedDeviceStatus, typ string) *metav1.Condition {
	if s == nil {
		return nil
	}
	for i := range s.Conditions {
		if s.Conditions[i].Type == typ {
			return &s.Conditions[i]
		}
	}
	return nil
}

// A pod's claim gives it its device through devplumb, from either source:
// the kubelet's PodResources (the CDI rule, no API read for the device) or
// the API server (pod, claim, slices: a claim no container references, which
// the kubelet does not report, or a config naming the claim). The delegate
// moves the device the attribute names, with the driver's device-info; the
// network-status entry and the claim's status.devices[].networkData carry the
// result beside the driver's own fields; DEL removes devplumb's part of both.
func TestCNIDeviceFromClaim(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conf     map[string]any
		report   bool // the kubelet reports the claim with its CDI device
		template bool // the claim is made from a template
		noCDI    bool // the kubelet reports the claim without a CDI device
		noIDAttr bool // the slice has no deviceID attribute: the CDI rule gives the ID
	}{
		{"local resourceName", map[string]any{"resourceName": cniResource}, true, false, false, false},
		{"api resourceName network-only claim", map[string]any{"resourceName": cniResource}, false, true, false, false},
		{"api resourceName no CDI device", map[string]any{"resourceName": cniResource}, true, false, true, false},
		{"api resourceClaim", map[string]any{"resourceClaim": "net", "request": "net"}, true, false, false, false},
		{"api resourceClaim from template", map[string]any{"resourceClaim": "net"}, false, true, false, false},
		{"api resourceClaim ID by the CDI rule", map[string]any{"resourceClaim": "net"}, true, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newCNINode(t)
			dev := n.veth()
			idAttr := dev
			if tc.noIDAttr {
				idAttr = ""
			}
			n.slice(cniDev{"dev-0", attrs(idAttr, cniResource)})
			claimName := "claim-" + cniRandom()
			pod := n.pod("pod-"+cniRandom(), claimName, tc.template)
			var owner *corev1.Pod
			if tc.template {
				owner = pod
			}
			n.claim(claimName, owner, []*corev1.Pod{pod}, "dev-0")
			if tc.report {
				cdi := dev
				if tc.noCDI {
					cdi = ""
				}
				n.report(pod, claimName, []string{"dev-0"}, []string{cdi})
			}
			n.driverEntry(claimName, "dev-0")
			netns := testenv.NetNS(t).Path()

			res := n.run("ADD", n.conf(tc.conf), netns, pod, "net1")
			if res.Code != 0 {
				t.Fatalf("ADD: %+v", res)
			}
			if onHost(dev) {
				t.Fatalf("device %s still on the host: the delegate did not get it", dev)
			}
			ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name)
			if len(ns) != 1 || ns[0].Interface != "net1" || !reflect.DeepEqual(ns[0].DeviceInfo, n.info) ||
				!slices.Equal(ns[0].IPs, []string{"192.0.2.10"}) {
				t.Fatalf("network-status %+v: want devplumb's entry for net1 with 192.0.2.10 and the driver's device-info %+v", ns, n.info)
			}
			st := deviceStatus(t, claimName, n.driver, "dev-0")
			want := &resourcev1.NetworkDeviceData{InterfaceName: "net1", IPs: []string{"192.0.2.10/24"}, HardwareAddress: ns[0].Mac}
			if st == nil || !reflect.DeepEqual(st.NetworkData, want) || ns[0].Mac == "" {
				t.Fatalf("claim status entry %+v: want networkData %+v", st, want)
			}
			if c := condition(st, "Ready"); c == nil || c.Status != metav1.ConditionTrue {
				t.Errorf("no Ready condition in %+v", st.Conditions)
			}
			if condition(st, "Prepared") == nil {
				t.Errorf("the driver's condition is gone: %+v", st.Conditions)
			}

			if res := n.run("DEL", n.conf(tc.conf), netns, pod, "net1"); res.Code != 0 {
				t.Fatalf("DEL: %+v", res)
			}
			if !onHost(dev) {
				t.Errorf("device %s not back on the host after DEL", dev)
			}
			if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name); len(ns) != 0 {
				t.Errorf("network-status after DEL: %+v", ns)
			}
			st = deviceStatus(t, claimName, n.driver, "dev-0")
			if st == nil || condition(st, "Prepared") == nil {
				t.Fatalf("DEL removed the driver's part of the entry: %+v", st)
			}
			if st.NetworkData != nil || condition(st, "Ready") != nil {
				t.Errorf("DEL left devplumb's part of the entry: %+v", st)
			}
		})
	}
}

// One NetworkAttachmentDefinition with a resourceName annotation serves a
// pod that got its device from a device plugin and a pod that got it from a
// DRA claim alike: devplumb reads the resource from the NAD either way.
func TestCNINADServesDevicePluginAndDRAPods(t *testing.T) {
	n := newCNINode(t)
	e2etest.Must(t, srv.InstallNADCRD(e2etest.Ctx(t)))
	_, err := srv.CreateNAD(e2etest.Ctx(t), cniNS, n.network, `{"cniVersion":"1.0.0","name":"`+n.network+`","type":"devplumb"}`,
		map[string]string{kube.ResourceNameAnnot: cniResource})
	e2etest.Must(t, err)
	dpDev, draDev := n.veth(), n.veth()
	n.slice(cniDev{"dev-0", attrs(draDev, cniResource)})

	dpPod, err := srv.CreatePod(e2etest.Ctx(t), cniNS, "dp-"+cniRandom(), n.name, nil)
	e2etest.Must(t, err)
	n.pr.SetPod(&v1.PodResources{Namespace: cniNS, Name: dpPod.Name, Containers: []*v1.ContainerResources{{
		Name: "c", Devices: []*v1.ContainerDevices{{ResourceName: cniResource, DeviceIds: []string{dpDev}}}}}})
	claimName := "claim-" + cniRandom()
	draPod := n.pod("dra-"+cniRandom(), claimName, false)
	n.claim(claimName, nil, []*corev1.Pod{draPod}, "dev-0")
	n.report(draPod, claimName, []string{"dev-0"}, []string{draDev})

	for _, p := range []struct {
		pod *corev1.Pod
		dev string
	}{{dpPod, dpDev}, {draPod, draDev}} {
		netns := testenv.NetNS(t).Path()
		if res := n.run("ADD", n.conf(nil), netns, p.pod, "net1"); res.Code != 0 {
			t.Fatalf("ADD of pod %s: %+v", p.pod.Name, res)
		}
		if onHost(p.dev) {
			t.Errorf("pod %s: device %s still on the host", p.pod.Name, p.dev)
		}
		if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, p.pod.Name); len(ns) != 1 || !reflect.DeepEqual(ns[0].DeviceInfo, n.info) {
			t.Errorf("pod %s: network-status %+v", p.pod.Name, ns)
		}
		if res := n.run("DEL", n.conf(nil), netns, p.pod, "net1"); res.Code != 0 {
			t.Fatalf("DEL of pod %s: %+v", p.pod.Name, res)
		}
		if !onHost(p.dev) {
			t.Errorf("pod %s: device %s not back after DEL", p.pod.Name, p.dev)
		}
	}
	if st := deviceStatus(t, claimName, n.driver, "dev-0"); st != nil {
		t.Errorf("claim status left after DEL: %+v", st)
	}
}

// Two attachments of one pod take the two devices of one claim, one each;
// each writes and removes only its own device's entry (one field manager per
// device: an apply under a shared one would drop the other's entry).
func TestCNITwoAttachmentsOneClaim(t *testing.T) {
	n := newCNINode(t)
	devA, devB := n.veth(), n.veth()
	n.slice(cniDev{"dev-a", attrs(devA, cniResource)}, cniDev{"dev-b", attrs(devB, cniResource)})
	claimName := "claim-" + cniRandom()
	pod := n.pod("pod-"+cniRandom(), claimName, false)
	n.claim(claimName, nil, []*corev1.Pod{pod}, "dev-a", "dev-b")
	netns := testenv.NetNS(t).Path()
	conf := n.conf(map[string]any{"resourceClaim": "net"})
	for _, ifName := range []string{"net1", "net2"} {
		if res := n.run("ADD", conf, netns, pod, ifName); res.Code != 0 {
			t.Fatalf("ADD %s: %+v", ifName, res)
		}
	}
	if onHost(devA) || onHost(devB) {
		t.Fatalf("both devices must be in the pod: %s on host %v, %s on host %v", devA, onHost(devA), devB, onHost(devB))
	}
	got := map[string]string{}
	for _, d := range []string{"dev-a", "dev-b"} {
		if st := deviceStatus(t, claimName, n.driver, d); st != nil && st.NetworkData != nil {
			got[d] = st.NetworkData.InterfaceName
		}
	}
	if len(got) != 2 || got["dev-a"] == got["dev-b"] {
		t.Fatalf("claim entries' interfaces %v: want net1 and net2 on the two devices", got)
	}
	if res := n.run("DEL", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("DEL net1: %+v", res)
	}
	for d, ifName := range got {
		st := deviceStatus(t, claimName, n.driver, d)
		if ifName == "net1" && st != nil {
			t.Errorf("entry of %s (net1) left after its DEL: %+v", d, st)
		}
		if ifName == "net2" && (st == nil || st.NetworkData == nil || st.NetworkData.InterfaceName != "net2") {
			t.Errorf("entry of %s (net2) lost by net1's DEL: %+v", d, st)
		}
	}
	if res := n.run("DEL", conf, netns, pod, "net2"); res.Code != 0 {
		t.Fatalf("DEL net2: %+v", res)
	}
	if !onHost(devA) || !onHost(devB) {
		t.Errorf("devices not back on the host")
	}
}

// Bad input: each a clear CNI error naming what is wrong, and nothing
// written: the device stays on the host, no network-status, no claim
// status, no state record.
func TestCNIBadClaims(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(n *cniNode) (pod *corev1.Pod, claim string)
		conf  map[string]any
		code  uint
		want  string
	}{
		{"claim missing", func(n *cniNode) (*corev1.Pod, string) {
			return n.pod("pod-"+cniRandom(), "nope", false), ""
		}, map[string]any{"resourceClaim": "net"}, 100, `ResourceClaim default/nope (pod claim "net") does not exist`},
		{"pod claim not in spec", claimed(true, "dev-0"), map[string]any{"resourceClaim": "other"}, 100, `has no claim "other" in spec.resourceClaims (it has net)`},
		{"not allocated", claimed(false), map[string]any{"resourceClaim": "net"}, 100, "is not allocated"},
		{"not reserved for the pod", claimed(false, "dev-0"), map[string]any{"resourceClaim": "net"}, 100, "is not reserved for pod"},
		{"no device of the resource", claimed(true, "dev-0"), map[string]any{"resourceClaim": "net", "resourceName": "example.com/other"}, 100,
			"has no allocated device with k8s.cni.cncf.io/resourceName=example.com/other"},
		{"no device of the request", claimed(true, "dev-0"), map[string]any{"resourceClaim": "net", "request": "other"}, 100,
			"has no allocated device of request other (allocated: request net: "},
		{"resourceName matches no device", claimed(true, "dev-0"), map[string]any{"resourceName": "example.com/other"}, 100, "has no usable device of resource example.com/other"},
		{"device lacks the attributes", claimed(true, "bare"), map[string]any{"resourceClaim": "net"}, 100, "has no attribute k8s.cni.cncf.io/resourceName"},
		{"device lacks the deviceID", claimed(true, "noid"), map[string]any{"resourceClaim": "net"}, 100, "has no attribute k8s.cni.cncf.io/deviceID"},
		{"deviceID attribute not a device ID", claimed(true, "evil"), map[string]any{"resourceClaim": "net"}, 100, `DRA device ID of ResourceClaim`},
		{"claim shared by two pods", func(n *cniNode) (*corev1.Pod, string) {
			c := "claim-" + cniRandom()
			p := n.pod("pod-"+cniRandom(), c, false)
			q := n.pod("pod-"+cniRandom(), c, false)
			n.claim(c, nil, []*corev1.Pod{p, q}, "dev-0")
			return p, c
		}, map[string]any{"resourceClaim": "net"}, 100, "is reserved for 2 pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newCNINode(t)
			dev := n.veth()
			n.slice(cniDev{"dev-0", attrs(dev, cniResource)}, cniDev{"bare", nil}, cniDev{"noid", attrs("", cniResource)},
				cniDev{"evil", attrs("../../etc/x", cniResource)})
			pod, claim := tc.setup(n)
			res := n.run("ADD", n.conf(tc.conf), testenv.NetNS(t).Path(), pod, "net1")
			if res.Code != tc.code || !strings.Contains(res.Msg+" "+res.Details, tc.want) {
				t.Fatalf("ADD: %+v\nwant code %d saying %q", res, tc.code, tc.want)
			}
			n.nothingWritten(pod, claim, dev)
		})
	}
}

// claimed is a TestCNIBadClaims setup: a pod whose claim "net" is a fresh
// ResourceClaim allocated devices, reserved for the pod or not.
func claimed(reserved bool, devices ...string) func(n *cniNode) (*corev1.Pod, string) {
	return func(n *cniNode) (*corev1.Pod, string) {
		c := "claim-" + cniRandom()
		p := n.pod("pod-"+cniRandom(), c, false)
		var reservedFor []*corev1.Pod
		if reserved {
			reservedFor = []*corev1.Pod{p}
		}
		n.claim(c, nil, reservedFor, devices...)
		return p, c
	}
}

// A device another attachment holds is not handed out again: the second
// attachment of a one-device claim fails, and leaves the first alone.
func TestCNIDeviceHeldByAnotherAttachment(t *testing.T) {
	n := newCNINode(t)
	dev, pod, claimName := n.oneDevicePod(false)
	netns := testenv.NetNS(t).Path()
	conf := n.conf(map[string]any{"resourceClaim": "net"})
	if res := n.run("ADD", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("ADD net1: %+v", res)
	}
	res := n.run("ADD", conf, netns, pod, "net2")
	if res.Code != 101 || !strings.Contains(res.Msg, dev+" held by pod default/"+pod.Name) {
		t.Fatalf("ADD net2: %+v\nwant code 101 naming the holder", res)
	}
	st := deviceStatus(t, claimName, n.driver, "dev-0")
	if st == nil || st.NetworkData == nil || st.NetworkData.InterfaceName != "net1" {
		t.Errorf("the failed ADD touched the holder's entry: %+v", st)
	}
	if res := n.run("DEL", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("DEL net1: %+v", res)
	}
}

// nothingWritten: after a failed ADD the device is on the host, the pod has
// no network-status, the claim no status entry, the state no record.
func (n *cniNode) nothingWritten(pod *corev1.Pod, claim, dev string) {
	t := n.t
	t.Helper()
	if !onHost(dev) {
		t.Errorf("device %s left the host", dev)
	}
	if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name); len(ns) != 0 {
		t.Errorf("network-status written: %+v", ns)
	}
	if claim != "" {
		rc, err := srv.Client.ResourceV1().ResourceClaims(cniNS).Get(e2etest.Ctx(t), claim, metav1.GetOptions{})
		e2etest.Must(t, err)
		if len(rc.Status.Devices) != 0 {
			t.Errorf("claim status written: %+v", rc.Status.Devices)
		}
	}
	recs, _ := filepath.Glob(filepath.Join(n.dir, "state", "attachments", "*"))
	if len(recs) != 0 {
		t.Errorf("state records left: %v", recs)
	}
	if files, _ := os.ReadDir(filepath.Join(n.dir, "devinfo", "cni")); len(files) != 0 {
		t.Errorf("CNI device-info files left: %d", len(files))
	}
}

// CNI GC of an attachment the runtime no longer has removes devplumb's part
// of the claim's status from the state record alone, with the delegate's
// setup and the claim.
func TestCNIGCRemovesClaimStatus(t *testing.T) {
	n := newCNINode(t)
	dev, pod, claimName := n.oneDevicePod(false)
	n.report(pod, claimName, []string{"dev-0"}, []string{dev})
	n.driverEntry(claimName, "dev-0")
	// GC is CNI 1.1.0.
	conf := n.conf(map[string]any{"resourceName": cniResource, "cniVersion": "1.1.0"})
	netns := testenv.NetNS(t).Path()
	if res := n.run("ADD", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("ADD: %+v", res)
	}
	if st := deviceStatus(t, claimName, n.driver, "dev-0"); st == nil || st.NetworkData == nil {
		t.Fatalf("claim status after ADD: %+v", st)
	}
	conf["cni.dev/valid-attachments"] = []any{}
	if res := n.run("GC", conf, "", pod, ""); res.Code != 0 {
		t.Fatalf("GC: %+v", res)
	}
	st := deviceStatus(t, claimName, n.driver, "dev-0")
	if st == nil || st.NetworkData != nil || condition(st, "Ready") != nil || condition(st, "Prepared") == nil {
		t.Errorf("after GC the entry must hold the driver's part only: %+v", st)
	}
	if !onHost(dev) {
		t.Errorf("GC did not give the device back")
	}
	recs, _ := filepath.Glob(filepath.Join(n.dir, "state", "attachments", "*"))
	if len(recs) != 0 {
		t.Errorf("state left after GC: %v", recs)
	}
}
