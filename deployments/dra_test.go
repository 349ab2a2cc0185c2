package deployments

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/devplumb/devplumb/pkg/netdev/dramode"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
)

// The DRA objects live in dra/, an alternative to netdev-dp-daemonset.yaml (the chart's
// dra.enabled, the kustomize Component dra/kustomization.yaml).
func decodeDRA(t *testing.T) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob("dra/*.yaml")
	files = slices.DeleteFunc(files, func(f string) bool { return f == "dra/kustomization.yaml" })
	if err != nil || len(files) != 3 {
		t.Fatalf("dra/: %v %v", files, err)
	}
	var out []runtime.Object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, decodeDocs(t, f, data)...)
	}
	return out
}

func draObjects[T runtime.Object](objs []runtime.Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestDRAConfigIsTheDevicePluginConfig: one config serves both modes; the DRA
// ConfigMap is the device plugin's, and each of its resources has a DeviceClass
// whose selector picks exactly that resource's devices of netdev-dp's driver.
func TestDRAConfigIsTheDevicePluginConfig(t *testing.T) {
	objs := decodeDRA(t)
	cms := draObjects[*corev1.ConfigMap](objs)
	var dpCM *corev1.ConfigMap
	for _, o := range decode(t)["netdev-dp-daemonset.yaml"] {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			dpCM = cm
		}
	}
	if len(cms) != 1 || dpCM == nil {
		t.Fatalf("want one DRA ConfigMap and the device plugin's, have %d and %v", len(cms), dpCM != nil)
	}
	if a, b := normalized(t, cms[0]).(*corev1.ConfigMap).Data, normalized(t, dpCM).(*corev1.ConfigMap).Data; !reflect.DeepEqual(a, b) {
		t.Errorf("DRA config %v differs from the device plugin's %v", a, b)
	}
	cfg, err := resources.ParseConfig([]byte(cms[0].Data["config.json"]))
	if err != nil {
		t.Fatal(err)
	}
	classes := draObjects[*resourceapi.DeviceClass](objs)
	if len(classes) != len(cfg.Resources) {
		t.Errorf("%d DeviceClasses for %d resources", len(classes), len(cfg.Resources))
	}
	for _, r := range cfg.Resources {
		var matching []string
		for _, c := range classes {
			if classSelects(t, c, r.ResourceName) {
				matching = append(matching, c.Name)
			}
		}
		if len(matching) != 1 {
			t.Errorf("resource %s: selected by DeviceClasses %v, want exactly one", r.ResourceName, matching)
		}
	}
	checkExtendedResourceNames(t, classes)
}

// checkExtendedResourceNames: each class serves, as an extended resource backed by DRA
// (KEP-5004), the very resource name its selector picks, so a pod asking
// resources.limits {R: n} of device-plugin mode gets the devices of R in DRA mode; no two
// classes name the same one (the scheduler would pick one of them).
func checkExtendedResourceNames(t *testing.T, classes []*resourceapi.DeviceClass) {
	t.Helper()
	seen := map[string]string{}
	for _, c := range classes {
		name := c.Spec.ExtendedResourceName
		if name == nil {
			t.Errorf("DeviceClass %s has no extendedResourceName", c.Name)
			continue
		}
		if !classSelects(t, c, *name) {
			t.Errorf("DeviceClass %s: extendedResourceName %s is not the resource its selector picks", c.Name, *name)
		}
		if prev, dup := seen[*name]; dup {
			t.Errorf("DeviceClasses %s and %s both serve extended resource %s", prev, c.Name, *name)
		}
		seen[*name] = c.Name
	}
}

// classSelects evaluates a class's CEL selectors with the DRA library on a device of
// netdev-dp's driver that has resource res; a device of another driver must never match.
func classSelects(t *testing.T, c *resourceapi.DeviceClass, res string) bool {
	t.Helper()
	dev := func(driver string) cel.Device {
		return cel.Device{Driver: driver, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			dramode.AttrResourceName: {StringValue: &res}, dramode.AttrDeviceID: {StringValue: ptr("x")},
		}}
	}
	all := len(c.Spec.Selectors) > 0
	for _, s := range c.Spec.Selectors {
		compiled := cel.GetCompiler(cel.Features{}).CompileCELExpression(s.CEL.Expression, cel.Options{})
		if compiled.Error != nil {
			t.Fatalf("DeviceClass %s: %v", c.Name, compiled.Error)
		}
		ok, _, err := compiled.DeviceMatches(context.Background(), dev(dramode.DefaultDriverName))
		if err != nil {
			t.Fatalf("DeviceClass %s: %v", c.Name, err)
		}
		other, _, _ := compiled.DeviceMatches(context.Background(), dev("other.example.com"))
		if other {
			t.Errorf("DeviceClass %s selects another driver's device", c.Name)
		}
		all = all && ok
	}
	return all
}

func ptr(s string) *string { return &s }

// TestDRADaemonSet: DRA mode, the node's name, the service account the RBAC binds, and
// every directory netdev-dp is told to use mounted from the same host path (the kubelet
// calls the driver's socket by its host path).
func TestDRADaemonSet(t *testing.T) {
	objs := decodeDRA(t)
	dss := draObjects[*appsv1.DaemonSet](objs)
	if len(dss) != 1 {
		t.Fatalf("%d DaemonSets", len(dss))
	}
	spec := dss[0].Spec.Template.Spec
	c := spec.Containers[0]
	if !slices.Contains(c.Args, "--mode=dra") {
		t.Errorf("args %v: not DRA mode", c.Args)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Errorf("env %v: no NODE_NAME from spec.nodeName", c.Env)
	}
	// netdev-dp-rbac.yaml's, shared with the device plugin's DaemonSet.
	sas := draObjects[*corev1.ServiceAccount](decode(t)["netdev-dp-rbac.yaml"])
	if len(sas) != 1 || spec.ServiceAccountName != sas[0].Name {
		t.Errorf("service account %q, netdev-dp-rbac.yaml has %v", spec.ServiceAccountName, sas)
	}
	want := map[string]string{"--devinfo-dir": "", "--cdi-dir": "", "--kubelet-registrar-dir": "", "--kubelet-plugins-dir": "/" + dramode.DefaultDriverName}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		sub, ok := want[k]
		if !ok {
			continue
		}
		delete(want, k)
		if got := hostPathOf(spec, c, v+sub); got != v+sub {
			t.Errorf("%s: %s is %q on the host, want the same path", k, v+sub, got)
		}
	}
	if len(want) != 0 {
		t.Errorf("args %v lack %v", c.Args, want)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type == corev1.HostPathUnset) {
			t.Errorf("hostPath volume %s has no type", v.Name)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || (sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("container %s not hardened: %+v", c.Name, sc)
	}
}

// TestDRARBACIsWhatTheKubeletPluginLibraryUses: the rules are exactly what
// kubeletplugin and its ResourceSlice controller call, bound to the DaemonSet's account.
func TestDRARBACIsWhatTheKubeletPluginLibraryUses(t *testing.T) {
	objs := decodeDRA(t)
	roles := draObjects[*rbacv1.ClusterRole](objs)
	bindings := draObjects[*rbacv1.ClusterRoleBinding](objs)
	if len(roles) != 1 || len(bindings) != 1 {
		t.Fatalf("%d ClusterRoles, %d bindings", len(roles), len(bindings))
	}
	got := map[string][]string{}
	for _, r := range roles[0].Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got[g+"/"+res] = append(got[g+"/"+res], r.Verbs...)
			}
		}
	}
	want := map[string][]string{
		"resource.k8s.io/resourceslices": {"get", "list", "watch", "create", "update", "delete"},
		"resource.k8s.io/resourceclaims": {"get"},
		"/nodes":                         {"get"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rules %v, want %v", got, want)
	}
	b := bindings[0]
	if b.RoleRef.Name != roles[0].Name || len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != "netdev-dp" {
		t.Errorf("binding %+v", b)
	}
}
