package deployments

import (
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestNetdevDPDaemonSetsAreProbed: both netdev-dp DaemonSets (device plugin, DRA) serve
// metrics and probes, probe /healthz for liveness and /readyz for readiness on the port
// --metrics-address names, and do not share that port (both may run on a node while it
// moves from one mode to the other; netdev-dp runs on the host network).
func TestNetdevDPDaemonSetsAreProbed(t *testing.T) {
	dra := draObjects[*appsv1.DaemonSet](decodeDRA(t))
	if len(dra) != 1 {
		t.Fatalf("%d DRA DaemonSets", len(dra))
	}
	ports := map[int32]string{}
	for _, ds := range []*appsv1.DaemonSet{daemonSet(t, decode(t)["netdev-dp-daemonset.yaml"]), dra[0]} {
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
			if p.probe.HTTPGet.Path != p.path || containerPort(c, p.probe.HTTPGet.Port.String()) != port {
				t.Errorf("%s: %s probe %s on %s, want %s on %d", ds.Name, p.kind, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path, port)
			}
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
