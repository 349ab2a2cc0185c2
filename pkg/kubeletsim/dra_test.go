package kubeletsim_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
)

// A checkpoint with prepared claims (written by a node with DRA) is served
// as the kubelet serves its DRA state: each claim in dynamic_resources of
// the containers that reference it, a claim referenced by none nowhere.
func TestCheckpointedClaimsInPodResources(t *testing.T) {
	pod := kubeletsim.PodAllocation{Namespace: "ns", Name: "web", UID: "u1",
		Containers: []kubeletsim.ContainerAllocation{{Name: "app", Claims: []string{"net"}}, {Name: "side"}},
		Claims: []kubeletsim.PreparedClaim{
			{PodClaim: "net", Namespace: "ns", Name: "web-net-abcde", UID: "c1", OwnedByPod: true, Drivers: []string{"d.example.com"},
				Devices: []kubeletsim.PreparedDevice{{Driver: "d.example.com", Pool: "node", Device: "dev0",
					CDIDeviceIDs: []string{"example.com/net=dev0"}}}},
			{PodClaim: "netonly", Namespace: "ns", Name: "shared", UID: "c2", Drivers: []string{"d.example.com"},
				Devices: []kubeletsim.PreparedDevice{{Driver: "d.example.com", Pool: "node", Device: "dev1"}}},
		}}
	n, got := servedPod(t, pod)
	for _, ctr := range got.GetContainers() {
		drs := ctr.GetDynamicResources()
		switch ctr.GetName() {
		case "app":
			if len(drs) != 1 || drs[0].GetClaimName() != "web-net-abcde" || drs[0].GetClaimNamespace() != "ns" ||
				len(drs[0].GetClaimResources()) != 1 {
				t.Fatalf("app: %v", drs)
			}
			r := drs[0].GetClaimResources()[0]
			if r.GetDriverName() != "d.example.com" || r.GetPoolName() != "node" || r.GetDeviceName() != "dev0" ||
				len(r.GetCdiDevices()) != 1 || r.GetCdiDevices()[0].GetName() != "example.com/net=dev0" {
				t.Errorf("app claim resource %v", r)
			}
		default:
			if len(drs) != 0 {
				t.Errorf("%s references no claim but gets %v", ctr.GetName(), drs)
			}
		}
	}
	// Without an API server the pod cannot be released: it stays.
	err := n.DelPodContext(t.Context(), "ns", "web")
	if err == nil || !strings.Contains(err.Error(), "no API server") || len(n.Pods()) != 1 {
		t.Errorf("DelPod without DRA = %v, pods %d", err, len(n.Pods()))
	}
}

func TestClaimsValidated(t *testing.T) {
	n := startNode(t, root(t))
	for _, tc := range []struct {
		spec kubeletsim.PodSpec
		want string
	}{
		{kubeletsim.PodSpec{Namespace: "ns", Name: "p", Claims: []kubeletsim.PodClaim{{Name: "Net", ResourceClaimName: "c"}}}, `pod claim name "Net"`},
		{kubeletsim.PodSpec{Namespace: "ns", Name: "p", Claims: []kubeletsim.PodClaim{{Name: "net"}}}, "exactly one of"},
		{kubeletsim.PodSpec{Namespace: "ns", Name: "p", Claims: []kubeletsim.PodClaim{{Name: "net", ResourceClaimName: "c"},
			{Name: "net", ResourceClaimName: "d"}}}, `pod claim "net" given twice`},
		{kubeletsim.PodSpec{Namespace: "ns", Name: "p", Containers: []kubeletsim.ContainerSpec{{Name: "app", Claims: []string{"x"}}}},
			`references claim "x", which is not a claim of the pod`},
		{kubeletsim.PodSpec{Namespace: "ns", Name: "p", Claims: []kubeletsim.PodClaim{{Name: "net", ResourceClaimName: "c"}}},
			"no API server"},
	} {
		_, err := n.AddPod(t.Context(), tc.spec)
		if !errors.Is(err, kubeletsim.ErrInvalidPod) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AddPod(%+v) = %v, want %q", tc.spec, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(kubeletsim.PluginsRegistryDir(n.Root()))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a node without DRA made %s (%v)", kubeletsim.PluginsRegistryDir(n.Root()), err)
	}
}
