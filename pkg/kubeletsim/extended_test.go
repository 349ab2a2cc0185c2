package kubeletsim_test

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"testing"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/podresources"
)

// servedPod writes a checkpoint with one pod and answers the kubelet's Get
// for it, through a node started on that checkpoint (returned too).
func servedPod(t *testing.T, pod kubeletsim.PodAllocation) (*kubeletsim.Node, *v1.PodResources) {
	t.Helper()
	dir := root(t)
	data, err := json.Marshal(map[string]any{"version": 1, "pods": []any{pod}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(kubeletsim.StateDir(dir), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubeletsim.CheckpointPath(dir), data, 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, dir)
	c, err := podresources.New(n.PodResourcesSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Get(t.Context(), pod.Namespace, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	return n, got
}

// report is the answer in a form to compare: per container,
// "claim device [cdi...]" for each claim resource.
func report(p *v1.PodResources) map[string][]string {
	out := map[string][]string{}
	var order []string
	for _, c := range p.GetContainers() {
		order = append(order, c.GetName())
		out[c.GetName()] = []string{}
		for _, dr := range c.GetDynamicResources() {
			for _, cr := range dr.GetClaimResources() {
				var cdi []string
				for _, d := range cr.GetCdiDevices() {
					cdi = append(cdi, d.GetName())
				}
				out[c.GetName()] = append(out[c.GetName()], fmt.Sprintf("%s %s %v", dr.GetClaimName(), cr.GetDeviceName(), cdi))
			}
		}
	}
	out["order"] = order
	return out
}

// What the kubelet reports for a pod whose extended resource
// example.com/hostdev: 2 a DRA driver serves (the scheduler's claim, mapped
// to container app), with a sidecar and an init container, and a container
// naming one request of a pod claim: the scheduler's claim for the
// containers the status maps (app), the pod claim whole for the container
// naming one of its requests; sidecars first, no other init container; a
// claim's second device of a driver listed with the first's CDI device
// before its own, as kubelets 1.34-1.37 list it.
func TestExtendedClaimInPodResources(t *testing.T) {
	const hostdev = "example.com/hostdev"
	dev := func(name string) kubeletsim.PreparedDevice {
		return kubeletsim.PreparedDevice{Driver: "netdev.devplumb.io", Pool: "node", Device: name, Requests: []string{"container-2-request-0"},
			CDIDeviceIDs: []string{hostdev + "=" + name}}
	}
	pod := kubeletsim.PodAllocation{Namespace: "ns", Name: "web", UID: "u1",
		Containers: []kubeletsim.ContainerAllocation{
			{Name: "setup", Init: true, ExtendedRequests: []string{"container-2-request-0"}},
			{Name: "proxy", Init: true, Sidecar: true, Claims: []string{"net/b"}},
			{Name: "app", ExtendedRequests: []string{"container-2-request-0"}},
		},
		Claims: []kubeletsim.PreparedClaim{
			{PodClaim: "net", Namespace: "ns", Name: "web-net-abcde", UID: "c1", OwnedByPod: true, Drivers: []string{"netdev.devplumb.io"},
				Devices: []kubeletsim.PreparedDevice{dev("vf0"), dev("vf1")}},
			{Namespace: "ns", Name: "web-extended-resources-x7k2p", UID: "c2", OwnedByPod: true, Extended: true,
				Drivers: []string{"netdev.devplumb.io"}, Devices: []kubeletsim.PreparedDevice{dev("ens2f0"), dev("ens2f1")}},
		}}
	want := map[string][]string{
		"order": {"proxy", "app"},
		"proxy": {"web-net-abcde vf0 [example.com/hostdev=vf0]", "web-net-abcde vf1 [example.com/hostdev=vf0 example.com/hostdev=vf1]"},
		"app": {"web-extended-resources-x7k2p ens2f0 [example.com/hostdev=ens2f0]",
			"web-extended-resources-x7k2p ens2f1 [example.com/hostdev=ens2f0 example.com/hostdev=ens2f1]"},
	}
	_, served := servedPod(t, pod)
	if got := report(served); !reflect.DeepEqual(got, want) {
		t.Errorf("PodResources\n got %q\nwant %q", got, want)
	}
}
