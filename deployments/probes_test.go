package deployments

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// netdevDPDaemonSets are the device plugin's DaemonSet and the DRA driver's.
func netdevDPDaemonSets(t *testing.T) []*appsv1.DaemonSet {
	t.Helper()
	dra := draObjects[*appsv1.DaemonSet](decodeDRA(t))
	if len(dra) != 1 {
		t.Fatalf("%d DRA DaemonSets", len(dra))
	}
	return []*appsv1.DaemonSet{daemonSet(t, decode(t)["netdev-dp-daemonset.yaml"]), dra[0]}
}

// TestNetdevDPDaemonSetsAreProbed: both netdev-dp DaemonSets (device plugin, DRA) serve
// metrics and probes, probe /healthz for liveness and /readyz for readiness on the port
// --metrics-address names, over HTTPS (--secure-metrics serves TLS on it), and do not share
// that port (both may run on a node while it moves from one mode to the other; netdev-dp
// runs on the host network).
func TestNetdevDPDaemonSetsAreProbed(t *testing.T) {
	ports := map[int32]string{}
	for _, ds := range netdevDPDaemonSets(t) {
		c := container(t, ds, "netdev-dp")
		port := metricsPort(t, ds.Name, c)
		if other, taken := ports[port]; taken {
			t.Errorf("%s and %s both serve metrics on port %d", other, ds.Name, port)
		}
		ports[port] = ds.Name
		for _, p := range []struct {
			probe *corev1.Probe
			kind  string
			path  string
		}{{c.LivenessProbe, "liveness", "/healthz"}, {c.ReadinessProbe, "readiness", "/readyz"}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("%s: no %s probe", ds.Name, p.kind)
				continue
			}
			if g := p.probe.HTTPGet; g.Path != p.path || containerPort(c, g.Port.String()) != port || g.Scheme != corev1.URISchemeHTTPS {
				t.Errorf("%s: %s probe %s %s on %s, want HTTPS %s on %d", ds.Name, p.kind, g.Scheme, g.Path, g.Port.String(), p.path, port)
			}
		}
	}
}

// TestNetdevDPMetricsAreSecured: both netdev-dp DaemonSets serve /metrics only to callers
// the API server authorizes (--secure-metrics), as the service account of
// netdev-dp-rbac.yaml, which may ask it (system:auth-delegator: TokenReview,
// SubjectAccessReview) and whose token is mounted.
func TestNetdevDPMetricsAreSecured(t *testing.T) {
	objs := decode(t)["netdev-dp-rbac.yaml"]
	sas := draObjects[*corev1.ServiceAccount](objs)
	bindings := draObjects[*rbacv1.ClusterRoleBinding](objs)
	if len(sas) != 1 || len(bindings) != 1 || len(objs) != 2 {
		t.Fatalf("netdev-dp-rbac.yaml: want one ServiceAccount and one ClusterRoleBinding, has %d objects", len(objs))
	}
	sa, b := sas[0], bindings[0]
	if b.RoleRef.Name != "system:auth-delegator" || len(b.Subjects) != 1 || b.Subjects[0].Name != sa.Name || b.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("binding %+v does not bind system:auth-delegator to %s/%s", b, sa.Namespace, sa.Name)
	}
	for _, ds := range netdevDPDaemonSets(t) {
		spec := ds.Spec.Template.Spec
		if spec.ServiceAccountName != sa.Name || ds.Namespace != sa.Namespace {
			t.Errorf("%s runs as %s/%q, want %s/%s", ds.Name, ds.Namespace, spec.ServiceAccountName, sa.Namespace, sa.Name)
		}
		if a := spec.AutomountServiceAccountToken; a != nil && !*a {
			t.Errorf("%s: no service account token: --secure-metrics cannot ask the API server", ds.Name)
		}
		if c := container(t, ds, "netdev-dp"); !slices.Contains(c.Args, "--secure-metrics") {
			t.Errorf("%s: args %v serve /metrics to anyone on the node's network: want --secure-metrics", ds.Name, c.Args)
		}
	}
}

// metricsPort is the port of c's --metrics-address=:PORT.
func metricsPort(t *testing.T, ds string, c corev1.Container) int32 {
	t.Helper()
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--metrics-address=:"); ok {
			for _, p := range c.Ports {
				if v == p.Name || v == itoa(p.ContainerPort) {
					return p.ContainerPort
				}
			}
			t.Fatalf("%s: --metrics-address port %s is not a container port %v", ds, v, c.Ports)
		}
	}
	t.Fatalf("%s: args %v have no --metrics-address=:PORT", ds, c.Args)
	return 0
}

// containerPort resolves a probe's port, by name or number, to a number (0: none).
func containerPort(c corev1.Container, port string) int32 {
	for _, p := range c.Ports {
		if port == p.Name || port == itoa(p.ContainerPort) {
			return p.ContainerPort
		}
	}
	return 0
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// TestHostNetworkMetricsPortsDiffer: devplumb's metrics and both netdev-dp DaemonSets serve
// on the node's network, and may all run on one node: no two share a port.
func TestHostNetworkMetricsPortsDiffer(t *testing.T) {
	m := container(t, daemonSet(t, decode(t)["devplumb-daemonset.yaml"]), "metrics")
	port := metricsArgs(t, m)["--listen"]
	ports := map[string]string{strings.TrimPrefix(port, ":"): "devplumb metrics"}
	for _, ds := range netdevDPDaemonSets(t) {
		p := itoa(metricsPort(t, ds.Name, container(t, ds, "netdev-dp")))
		if other, taken := ports[p]; taken {
			t.Errorf("%s and %s both serve on port %s of the node", other, ds.Name, p)
		}
		ports[p] = ds.Name
	}
}
