// Package deployments holds the Kubernetes manifests; its test decodes every one of them
// strictly as Kubernetes objects and checks what devplumb relies on.
package deployments

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
)

// decode reads every YAML document of every manifest under the current directory into
// typed objects, failing on unknown kinds and unknown fields.
func decode(t *testing.T) map[string][]runtime.Object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// kustomization.yaml is kustomize's input, not an object (kustomize_test.go).
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	nads, _ := filepath.Glob("nads/*.yaml")
	files = append(files, nads...)
	if len(files) < 7 {
		t.Fatalf("found only %v", files)
	}
	out := map[string][]runtime.Object{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if out[f] = decodeDocs(t, f, data); len(out[f]) == 0 {
			t.Fatalf("%s: no objects", f)
		}
	}
	return out
}

// decodeDocs decodes the YAML documents of one file strictly into typed objects.
func decodeDocs(t *testing.T, name string, data []byte) []runtime.Object {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := nadv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codec := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
	var out []runtime.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := codec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		out = append(out, obj)
	}
}

func TestRBACIsExactlyWhatDevplumbNeeds(t *testing.T) {
	objs := decode(t)["rbac.yaml"]
	var role *rbacv1.ClusterRole
	bindings := map[string]*rbacv1.ClusterRoleBinding{}
	var sa *corev1.ServiceAccount
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			role = o
		case *rbacv1.ClusterRoleBinding:
			bindings[o.Name] = o
		case *corev1.ServiceAccount:
			sa = o
		}
	}
	binding, metricsAuth := bindings["devplumb"], bindings["devplumb-metrics-auth"]
	if role == nil || binding == nil || metricsAuth == nil || sa == nil || len(bindings) != 2 {
		t.Fatalf("rbac.yaml needs a ServiceAccount, a ClusterRole and the bindings devplumb and devplumb-metrics-auth, has %d objects", len(objs))
	}
	// The metrics container's TokenReview and SubjectAccessReview, and nothing more.
	if metricsAuth.RoleRef.Name != "system:auth-delegator" || len(metricsAuth.Subjects) != 1 ||
		metricsAuth.Subjects[0].Name != sa.Name || metricsAuth.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("binding %+v does not bind system:auth-delegator to %s/%s", metricsAuth, sa.Namespace, sa.Name)
	}
	want := []rbacv1.PolicyRule{
		// list, watch: the agent's informers (this node's pods and slices, the NADs).
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"network-attachment-definitions"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"patch"}},
		// Only on its own node, for any driver: never arbitrary-node, never a fixed driver list.
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"}, Verbs: []string{"associated-node:patch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create"}},
	}
	if len(role.Rules) != len(want) {
		t.Fatalf("rules %+v, want %+v", role.Rules, want)
	}
	for i := range want {
		got := role.Rules[i]
		if !slices.Equal(got.APIGroups, want[i].APIGroups) || !slices.Equal(got.Resources, want[i].Resources) ||
			!slices.Equal(got.Verbs, want[i].Verbs) || len(got.ResourceNames) > 0 || len(got.NonResourceURLs) > 0 {
			t.Errorf("rule %d = %+v, want %+v", i, got, want[i])
		}
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("binding %+v does not bind role %s to %s/%s", binding, role.Name, sa.Namespace, sa.Name)
	}
}

// Scraping /metrics is one non-resource URL, nothing else.
func TestMetricsReaderRole(t *testing.T) {
	for _, o := range decode(t)["metrics-rbac.yaml"] {
		role, ok := o.(*rbacv1.ClusterRole)
		if !ok {
			continue
		}
		if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].NonResourceURLs, []string{"/metrics"}) ||
			!slices.Equal(role.Rules[0].Verbs, []string{"get"}) || len(role.Rules[0].Resources) > 0 {
			t.Errorf("%s rules %+v, want get on /metrics only", role.Name, role.Rules)
		}
		return
	}
	t.Fatal("metrics-rbac.yaml has no ClusterRole")
}

func TestDaemonSets(t *testing.T) {
	all := decode(t)
	ds := daemonSet(t, all["devplumb-daemonset.yaml"])
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != "devplumb" {
		t.Errorf("devplumb DaemonSet runs as %q, want the devplumb service account", spec.ServiceAccountName)
	}
	paths := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			paths[v.HostPath.Path] = true
		}
	}
	if !paths["/opt/cni/bin"] || !paths["/etc/cni/net.d"] {
		t.Errorf("devplumb DaemonSet mounts %v, needs /opt/cni/bin and /etc/cni/net.d", paths)
	}
	for _, c := range spec.Containers {
		if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("container %s: must drop all capabilities and privilege escalation", c.Name)
		}
	}

	var cm *corev1.ConfigMap
	for _, o := range all["netdev-dp-daemonset.yaml"] {
		if o, ok := o.(*corev1.ConfigMap); ok {
			cm = o
		}
	}
	daemonSet(t, all["netdev-dp-daemonset.yaml"])
	if cm == nil {
		t.Fatal("netdev-dp-daemonset.yaml: no ConfigMap")
	}
	if _, err := resources.ParseConfig([]byte(cm.Data["config.json"])); err != nil {
		t.Errorf("netdev-dp ConfigMap config.json: %v", err)
	}
}

func daemonSet(t *testing.T, objs []runtime.Object) *appsv1.DaemonSet {
	t.Helper()
	for _, o := range objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			return ds
		}
	}
	t.Fatal("no DaemonSet")
	return nil
}

// Every example NAD carries a devplumb config that devplumb itself accepts.
func TestNADConfigsAreValidDevplumbConfigs(t *testing.T) {
	n := 0
	for f, objs := range decode(t) {
		for _, o := range objs {
			nad, ok := o.(*nadv1.NetworkAttachmentDefinition)
			if !ok {
				continue
			}
			n++
			conf, err := config.Parse([]byte(nad.Spec.Config), nil)
			if err != nil {
				t.Errorf("%s: NAD %s: %v", f, nad.Name, err)
				continue
			}
			if conf.Name != nad.Name {
				t.Errorf("%s: config name %q differs from the NAD name %q", f, conf.Name, nad.Name)
			}
			annotated := nad.Annotations["k8s.v1.cni.cncf.io/resourceName"] != ""
			if !annotated && conf.ResourceName == "" {
				t.Errorf("%s: NAD %s names no device source (resourceName annotation or config)", f, nad.Name)
			}
			if annotated && (!conf.Capabilities["deviceID"] || !conf.Capabilities["CNIDeviceInfoFile"]) {
				t.Errorf("%s: NAD %s relies on Multus's deviceID but lacks the deviceID/CNIDeviceInfoFile capabilities", f, nad.Name)
			}
		}
	}
	if n < 4 {
		t.Fatalf("found %d NADs, want sriov, host-device, vhost-user and multus-delegation", n)
	}
}

func stripComments(doc []byte) []byte {
	var out []string
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return []byte(strings.Join(out, "\n"))
}
