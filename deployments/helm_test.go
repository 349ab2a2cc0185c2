package deployments

import (
	stdjson "encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// render renders the chart with the Helm library, as `helm template` does,
// into typed objects keyed "Kind/namespace/name".
func render(t *testing.T, values map[string]any) map[string]runtime.Object {
	t.Helper()
	ch, err := loader.Load("helm/devplumb")
	if err != nil {
		t.Fatal(err)
	}
	vals, err := chartutil.ToRenderValues(ch, values,
		chartutil.ReleaseOptions{Name: "devplumb", Namespace: "kube-system", IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	out := map[string]runtime.Object{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, obj := range decodeDocs(t, name, []byte(files[name])) {
			out[key(t, obj)] = obj
		}
	}
	return out
}

func key(t *testing.T, obj runtime.Object) string {
	t.Helper()
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%T/%s/%s", obj, m.GetNamespace(), m.GetName())
}

// plain is every object of the plain manifests but the example NADs.
func plain(t *testing.T) map[string]runtime.Object {
	out := map[string]runtime.Object{}
	for f, objs := range decode(t) {
		if strings.HasPrefix(f, "nads/") {
			continue
		}
		for _, obj := range objs {
			out[key(t, obj)] = obj
		}
	}
	return out
}

// plainDRA is plain with netdev-dp as a DRA driver, as deployments/dra/ installs it: the
// device-plugin DaemonSet and ConfigMap replaced by dra/'s objects.
func plainDRA(t *testing.T) map[string]runtime.Object {
	out := plain(t)
	for k := range out {
		if strings.HasSuffix(k, "/kube-system/netdev-dp") && !strings.Contains(k, "ServiceAccount") {
			delete(out, k)
		}
	}
	for _, f := range []string{"dra/netdev-dp-dra.yaml", "dra/deviceclasses.yaml", "dra/node-policy.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range decodeDocs(t, f, b) {
			out[key(t, obj)] = obj
		}
	}
	return out
}

// configJSON compares a ConfigMap's config.json as JSON, not as text: the chart
// writes it from values.
func normalized(t *testing.T, obj runtime.Object) runtime.Object {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return obj
	}
	cm = cm.DeepCopy()
	for k, v := range cm.Data {
		var parsed any
		if err := stdjson.Unmarshal([]byte(v), &parsed); err != nil {
			t.Fatalf("ConfigMap %s: %s: %v", cm.Name, k, err)
		}
		b, _ := stdjson.Marshal(parsed)
		cm.Data[k] = string(b)
	}
	return cm
}

// With its default values the chart renders exactly the objects of the plain
// manifests, field by field.
func TestHelmChartRendersThePlainManifests(t *testing.T) {
	sameObjects(t, render(t, nil), plain(t))
}

// With netdevDP.mode dra the chart renders deployments/ with deployments/dra/ in place of
// the device plugin, field by field.
func TestHelmChartRendersTheDRAManifests(t *testing.T) {
	sameObjects(t, render(t, map[string]any{"netdevDP": map[string]any{"mode": "dra"}}), plainDRA(t))
}

// sameObjects: the chart rendered exactly want's objects.
func sameObjects(t *testing.T, got, want map[string]runtime.Object) {
	t.Helper()
	if !slices.Equal(slices.Sorted(mapKeys(got)), slices.Sorted(mapKeys(want))) {
		t.Fatalf("chart renders %v, plain manifests hold %v", slices.Sorted(mapKeys(got)), slices.Sorted(mapKeys(want)))
	}
	for k, w := range want {
		if g := got[k]; !reflect.DeepEqual(normalized(t, g), normalized(t, w)) {
			gj, _ := stdjson.MarshalIndent(g, "", " ")
			wj, _ := stdjson.MarshalIndent(w, "", " ")
			t.Errorf("%s differs:\nchart:\n%s\nplain:\n%s", k, gj, wj)
		}
	}
}

// Values reach the objects: images, node selector, netdev-dp's config and
// log level, resources; netdev-dp can be left out.
func TestHelmChartValues(t *testing.T) {
	objs := render(t, map[string]any{
		"nodeSelector": map[string]any{"devplumb.io/node": "yes"},
		"devplumb": map[string]any{"image": map[string]any{"repository": "registry.example/devplumb", "tag": "v1.2.3"},
			"apiServer": "https://192.0.2.1:6443"},
		"netdevDP": map[string]any{"logLevel": "debug", "resources": map[string]any{"limits": map[string]any{"memory": "256Mi"}},
			"config": map[string]any{"resources": []any{map[string]any{"resourceName": "example.com/x", "netdevs": map[string]any{"names": []any{"eth9"}}}}}},
	})
	ds := daemonSet(t, []runtime.Object{objs["*v1.DaemonSet/kube-system/devplumb"]})
	if c := ds.Spec.Template.Spec.Containers[0]; c.Image != "registry.example/devplumb:v1.2.3" || ds.Spec.Template.Spec.NodeSelector["devplumb.io/node"] != "yes" {
		t.Errorf("devplumb DaemonSet: image %q nodeSelector %v", c.Image, ds.Spec.Template.Spec.NodeSelector)
	}
	if env := ds.Spec.Template.Spec.Containers[0].Env; !slices.ContainsFunc(env, func(e corev1.EnvVar) bool {
		return e.Name == "API_SERVER" && e.Value == "https://192.0.2.1:6443"
	}) {
		t.Errorf("devplumb.apiServer did not reach the installer: %v", env)
	}
	dp := daemonSet(t, []runtime.Object{objs["*v1.DaemonSet/kube-system/netdev-dp"]})
	c := dp.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--log-level=debug") || c.Resources.Limits.Memory().String() != "256Mi" {
		t.Errorf("netdev-dp: args %v limits %v", c.Args, c.Resources.Limits)
	}
	cm := objs["*v1.ConfigMap/kube-system/netdev-dp"].(*corev1.ConfigMap)
	if !strings.Contains(cm.Data["config.json"], `"eth9"`) || strings.Contains(cm.Data["config.json"], "sriov_vf") {
		t.Errorf("netdev-dp config: %s", cm.Data["config.json"])
	}
	checkAgentValues(t)
	checkResourcePrefix(t)
	if off := render(t, map[string]any{"netdevDP": map[string]any{"enabled": false}}); off["*v1.DaemonSet/kube-system/netdev-dp"] != nil {
		t.Error("netdevDP.enabled=false still renders netdev-dp")
	}
}

// checkResourcePrefix: netdevDP.resourcePrefix reaches netdev-dp as --resource-prefix in
// both modes, and nothing does when it is empty (netdev-dp refuses the flag with its own
// config).
func checkResourcePrefix(t *testing.T) {
	t.Helper()
	for _, mode := range []string{"deviceplugin", "dra"} {
		name := "*v1.DaemonSet/kube-system/netdev-dp"
		if mode == "dra" {
			name = "*v1.DaemonSet/kube-system/netdev-dp-dra"
		}
		for _, prefix := range []string{"", "example.com"} {
			objs := render(t, map[string]any{"netdevDP": map[string]any{"mode": mode, "resourcePrefix": prefix}})
			obj := objs[name]
			if obj == nil {
				t.Fatalf("mode %s renders no %s", mode, name)
			}
			args := daemonSet(t, []runtime.Object{obj}).Spec.Template.Spec.Containers[0].Args
			has := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--resource-prefix") })
			if has != (prefix != "") || (prefix != "" && !slices.Contains(args, "--resource-prefix="+prefix)) {
				t.Errorf("mode %s, resourcePrefix %q: args %v", mode, prefix, args)
			}
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// checkAgentValues: devplumb.metricsPort moves the metrics container's --listen, its
// container port and both probes; devplumb.agentResources are the agent's.
func checkAgentValues(t *testing.T) {
	t.Helper()
	objs := render(t, map[string]any{"devplumb": map[string]any{"metricsPort": 9200,
		"agentResources": map[string]any{"limits": map[string]any{"memory": "80Mi"}}}})
	ds := daemonSet(t, []runtime.Object{objs["*v1.DaemonSet/kube-system/devplumb"]})
	c := container(t, ds, "metrics")
	if l := metricsArgs(t, c)["--listen"]; l != ":9200" || containerPort(c, "9200") != 9200 ||
		c.LivenessProbe.HTTPGet.Port.IntValue() != 9200 || c.ReadinessProbe.HTTPGet.Port.IntValue() != 9200 {
		t.Errorf("devplumb.metricsPort 9200: --listen %s, ports %+v, probes on %s and %s", l, c.Ports,
			c.LivenessProbe.HTTPGet.Port.String(), c.ReadinessProbe.HTTPGet.Port.String())
	}
	if c := container(t, ds, "agent"); c.Resources.Limits.Memory().String() != "80Mi" {
		t.Errorf("devplumb.agentResources did not reach the agent: %v", c.Resources.Limits)
	}
}
