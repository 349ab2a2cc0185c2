package dra_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/podresources"
)

const simDriverName = "nodesim-test.devplumb.io"

func TestNodesimDRARegistration(t *testing.T) {
	root, n := simNode(t, "reg-node")
	d := simStartDriver(t, root, "reg-node", simDriverName, []string{"dev0"})
	if err := n.WaitDRADriver(e2etest.Ctx(t), simDriverName); err != nil {
		t.Fatal(err)
	}
	drivers := n.DRADrivers()
	if len(drivers) != 1 || drivers[0].Driver != simDriverName || drivers[0].Service != drapbv1.DRAPluginService ||
		drivers[0].Endpoint != filepath.Join(kubeletsim.PluginsDir(root), simDriverName, "dra.sock") {
		t.Fatalf("registered drivers = %+v, want %s at its dra.sock speaking %s", drivers, simDriverName, drapbv1.DRAPluginService)
	}
	if st := d.helper.RegistrationStatus(); st == nil || !st.PluginRegistered || st.Error != "" {
		t.Errorf("the driver was told %+v, want registered without error", st)
	}

	// A driver offering only v1beta1 is spoken to in v1beta1.
	old := simStartDriver(t, root, "reg-node", "old.devplumb.io", []string{"o0"}, kubeletplugin.NodeV1(false))
	if err := n.WaitDRADriver(e2etest.Ctx(t), "old.devplumb.io"); err != nil {
		t.Fatal(err)
	}
	for _, p := range n.DRADrivers() {
		if p.Driver == "old.devplumb.io" && p.Service != drapbv1beta1.DRAPluginService {
			t.Errorf("v1beta1-only driver registered with service %s", p.Service)
		}
	}
	ns := simNamespace(t, "nodesim-reg")
	simDeviceClass(t, "nodesim-reg-old", "old.devplumb.io")
	simTemplate(t, ns, "old", "nodesim-reg-old", 1)
	alloc, err := n.AddPod(e2etest.Ctx(t), kubeletsim.PodSpec{Namespace: ns, Name: "p",
		Containers: []kubeletsim.ContainerSpec{{Name: "app", Claims: []string{"net"}}},
		Claims:     []kubeletsim.PodClaim{{Name: "net", ResourceClaimTemplateName: "old"}}})
	if err != nil {
		t.Fatalf("pod with a claim of the v1beta1 driver: %v", err)
	}
	if got := alloc.Claims[0].Devices; len(got) != 1 || got[0].Device != "o0" ||
		!slices.Equal(got[0].CDIDeviceIDs, []string{simCDIName("old.devplumb.io", "o0")}) {
		t.Errorf("prepared through v1beta1: %+v", got)
	}
	if err := n.DelPodContext(e2etest.Ctx(t), ns, "p"); err != nil {
		t.Fatal(err)
	}
	if prepared, _, unprepared := old.state(); len(prepared) != 0 || len(unprepared) != 1 {
		t.Errorf("v1beta1 driver after pod del: prepared %v, unprepared %v", prepared, unprepared)
	}
}

func TestNodesimDRAPodsGetDistinctDevicesAndPodResourcesReportsReferencedClaims(t *testing.T) {
	const node = "claims-node"
	root, n := simNode(t, node)
	d := simStartDriver(t, root, node, simDriverName, []string{"dev0", "dev1", "dev2", "dev3"})
	if err := n.WaitDRADriver(e2etest.Ctx(t), simDriverName); err != nil {
		t.Fatal(err)
	}
	ns := simNamespace(t, "nodesim-claims")
	simDeviceClass(t, "nodesim-claims", simDriverName)
	simTemplate(t, ns, "net", "nodesim-claims", 1)
	direct := simClaim(t, ns, "direct", "nodesim-claims")

	c, err := kubeletsim.NewControlClient(root)
	if err != nil {
		t.Fatal(err)
	}
	// web: "net" referenced by app only, "netonly" by no container (a network-only claim).
	web, err := c.AddPod(e2etest.Ctx(t), kubeletsim.PodSpec{Namespace: ns, Name: "web",
		Containers: []kubeletsim.ContainerSpec{{Name: "app", Claims: []string{"net"}}, {Name: "sidecar"}},
		Claims: []kubeletsim.PodClaim{{Name: "net", ResourceClaimTemplateName: "net"},
			{Name: "netonly", ResourceClaimTemplateName: "net"}}})
	if err != nil {
		t.Fatalf("pod add web: %v", err)
	}
	db, err := c.AddPod(e2etest.Ctx(t), kubeletsim.PodSpec{Namespace: ns, Name: "db",
		Containers: []kubeletsim.ContainerSpec{{Name: "db", Claims: []string{"d"}}},
		Claims:     []kubeletsim.PodClaim{{Name: "d", ResourceClaimName: "direct"}}})
	if err != nil {
		t.Fatalf("pod add db: %v", err)
	}

	apiWeb, ok := simGetPod(t, ns, "web")
	if !ok || string(apiWeb.UID) != web.UID || apiWeb.Spec.NodeName != node {
		t.Fatalf("Pod object web: %+v (found %v), nodesim UID %s", apiWeb, ok, web.UID)
	}
	simCheckGenerated(t, web, apiWeb.UID, apiWeb.Status.ResourceClaimStatuses)
	devices := map[string]string{}
	for _, p := range []*kubeletsim.PodAllocation{web, db} {
		for _, pc := range p.Claims {
			simCheckAllocated(t, pc, types.UID(p.UID), node)
			if len(pc.Devices) != 1 {
				t.Fatalf("claim %s prepared with devices %+v, want 1", pc.Name, pc.Devices)
			}
			if other, dup := devices[pc.Devices[0].Device]; dup {
				t.Errorf("device %s given to claims %s and %s", pc.Devices[0].Device, other, pc.Name)
			}
			devices[pc.Devices[0].Device] = pc.Name
		}
	}
	if db.Claims[0].Name != "direct" || db.Claims[0].UID != string(direct.UID) || db.Claims[0].OwnedByPod {
		t.Errorf("db's claim %+v, want the direct claim, not owned by the pod", db.Claims[0])
	}
	prepared, calls, _ := d.state()
	want := []string{web.Claims[0].Name, web.Claims[1].Name, "direct"}
	if len(prepared) != 3 || len(calls) != 2 || !slices.Equal(calls[0], simSorted(want[:2])) || !slices.Equal(calls[1], want[2:]) {
		t.Errorf("driver was asked to prepare %v (now prepared %v), want %v then [direct]", calls, prepared, simSorted(want[:2]))
	}
	simCheckPodResources(t, n.PodResourcesSocket(), ns, web, db)

	// pod del undoes everything in the API server, and the driver unprepares.
	for _, p := range []string{"web", "db"} {
		if err := c.DelPod(e2etest.Ctx(t), ns, p); err != nil {
			t.Fatalf("pod del %s: %v", p, err)
		}
		if _, ok := simGetPod(t, ns, p); ok {
			t.Errorf("Pod object %s still there after pod del", p)
		}
	}
	if prepared, _, unprepared := d.state(); len(prepared) != 0 || len(unprepared) != 3 {
		t.Errorf("after pod del the driver has %v prepared and unprepared %v, want none and 3", prepared, unprepared)
	}
	left := simClaimsIn(t, ns)
	if len(left) != 1 || left[0].Name != "direct" {
		t.Fatalf("claims left: %v, want only the direct one", simClaimNames(left))
	}
	if cl := left[0]; cl.Status.Allocation != nil || len(cl.Status.ReservedFor) != 0 || len(cl.Finalizers) != 0 {
		t.Errorf("direct claim after pod del: allocation %v, reservedFor %v, finalizers %v; want none",
			cl.Status.Allocation, cl.Status.ReservedFor, cl.Finalizers)
	}
}

// checkGenerated: template claims are named, annotated and owned as the
// resourceclaim controller does, and recorded in the pod's status.
func simCheckGenerated(t *testing.T, p *kubeletsim.PodAllocation, uid types.UID, statuses []corev1.PodResourceClaimStatus) {
	t.Helper()
	for _, pc := range p.Claims {
		cl := simGetClaim(t, p.Namespace, pc.Name)
		if !pc.OwnedByPod || !strings.HasPrefix(cl.Name, p.Name+"-"+pc.PodClaim+"-") ||
			cl.Annotations["resource.kubernetes.io/pod-claim-name"] != pc.PodClaim {
			t.Errorf("generated claim %s (%+v): name, annotation or ownership wrong: %v", cl.Name, pc, cl.Annotations)
		}
		if len(cl.OwnerReferences) != 1 || cl.OwnerReferences[0].UID != uid || cl.OwnerReferences[0].Kind != "Pod" ||
			cl.OwnerReferences[0].Controller == nil || !*cl.OwnerReferences[0].Controller {
			t.Errorf("generated claim %s owners %+v, want the pod as controller", cl.Name, cl.OwnerReferences)
		}
		i := slices.IndexFunc(statuses, func(s corev1.PodResourceClaimStatus) bool { return s.Name == pc.PodClaim })
		if i < 0 || statuses[i].ResourceClaimName == nil || *statuses[i].ResourceClaimName != cl.Name {
			t.Errorf("pod status.resourceClaimStatuses %+v lacks %s -> %s", statuses, pc.PodClaim, cl.Name)
		}
	}
}

// checkAllocated: the claim is allocated on the node, reserved for the pod,
// with the scheduler's finalizer, and prepared with that device.
func simCheckAllocated(t *testing.T, pc kubeletsim.PreparedClaim, pod types.UID, node string) {
	t.Helper()
	cl := simGetClaim(t, pc.Namespace, pc.Name)
	a := cl.Status.Allocation
	if a == nil || len(a.Devices.Results) != 1 || a.Devices.Results[0].Driver != simDriverName || a.Devices.Results[0].Pool != node {
		t.Fatalf("claim %s allocation %+v, want one device of %s in pool %s", cl.Name, a, simDriverName, node)
	}
	if len(cl.Status.ReservedFor) != 1 || cl.Status.ReservedFor[0].UID != pod || !slices.Contains(cl.Finalizers, resourceapi.Finalizer) {
		t.Errorf("claim %s reservedFor %+v finalizers %v, want the pod and %s", cl.Name, cl.Status.ReservedFor, cl.Finalizers, resourceapi.Finalizer)
	}
	if len(pc.Devices) == 1 && (pc.Devices[0].Device != a.Devices.Results[0].Device || pc.Devices[0].Pool != node ||
		!slices.Equal(pc.Devices[0].CDIDeviceIDs, []string{simCDIName(simDriverName, pc.Devices[0].Device)})) {
		t.Errorf("claim %s prepared %+v, allocated %+v", cl.Name, pc.Devices, a.Devices.Results[0])
	}
}

// checkPodResources: Get and List report each claim for the containers that
// reference it only; the claim no container references is reported nowhere.
func simCheckPodResources(t *testing.T, socket, ns string, web, db *kubeletsim.PodAllocation) {
	t.Helper()
	pr, err := podresources.New(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	net, dev := web.Claims[0], web.Claims[0].Devices[0]
	want := map[string]map[string]string{ // pod -> container -> "claim driver pool device cdi" or ""
		"web": {"app": net.Name + " " + simDriverName + " " + dev.Pool + " " + dev.Device + " " + simCDIName(simDriverName, dev.Device), "sidecar": ""},
		"db":  {"db": "direct " + simDriverName + " " + db.Claims[0].Devices[0].Pool + " " + db.Claims[0].Devices[0].Device + " " + simCDIName(simDriverName, db.Claims[0].Devices[0].Device)},
	}
	list, err := pr.List(e2etest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for pod, ctrs := range want {
		got, err := pr.Get(e2etest.Ctx(t), ns, pod)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(list, func(p *v1.PodResources) bool { return p.Namespace == ns && p.Name == pod })
		if i < 0 {
			t.Fatalf("List lacks pod %s", pod)
		}
		for name, p := range map[string]*v1.PodResources{"Get": got, "List": list[i]} {
			for _, c := range p.GetContainers() {
				if s := simDynamicString(ns, c.GetDynamicResources()); s != ctrs[c.GetName()] {
					t.Errorf("%s %s/%s container %s dynamic_resources %q, want %q", name, ns, pod, c.GetName(), s, ctrs[c.GetName()])
				}
			}
			if len(p.GetContainers()) != len(ctrs) {
				t.Errorf("%s %s: containers %v", name, pod, p.GetContainers())
			}
		}
	}
}

func simDynamicString(ns string, drs []*v1.DynamicResource) string {
	var out []string
	for _, dr := range drs {
		if dr.GetClaimNamespace() != ns {
			return "namespace " + dr.GetClaimNamespace()
		}
		for _, r := range dr.GetClaimResources() {
			s := dr.GetClaimName() + " " + r.GetDriverName() + " " + r.GetPoolName() + " " + r.GetDeviceName()
			for _, c := range r.GetCdiDevices() {
				s += " " + c.GetName()
			}
			out = append(out, s)
		}
	}
	return strings.Join(out, "; ")
}

func simClaimNames(cls []resourceapi.ResourceClaim) []string {
	var out []string
	for _, c := range cls {
		out = append(out, c.Name)
	}
	return out
}

func simSorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
