package node_test

import (
	"context"
	"encoding/json"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/e2e/node"
)

// TestMultusTwoAttachmentsOfOneResource (scenario 2): Multus thin is the node's CNI
// (the bridge as the cluster default network); a pod with two attachments of
// deployments/nads/multus-delegation.yaml and two example.com/hostdev devices gets both
// devices, each attachment a different one, and they are the devices PodResources lists.
func TestMultusTwoAttachmentsOfOneResource(t *testing.T) {
	deployed(t)
	c := ctx(t)
	multus, err := kubeapi.FindBinary("DEVPLUMB_MULTUS", "multus-v4.2.3",
		"build it with scripts/build-multus.sh (make test and make e2e run it)")
	must(t, err)
	must(t, copyExec(multus, nd.HostPath("/opt/cni/bin/multus")))
	var bridge map[string]any
	must(t, json.Unmarshal([]byte(node.DefaultConflist), &bridge))
	conf := map[string]any{"cniVersion": "1.0.0", "name": "multus-cni-network", "plugins": []any{map[string]any{
		"type": "multus", "kubeconfig": nd.API.Kubeconfig, "delegates": []any{bridge},
		"cniDir": "/var/lib/cni/multus", "binDir": "/opt/cni/bin",
	}}}
	data, err := json.Marshal(conf)
	must(t, err)
	must(t, nd.SetConflist(c, "multus-cni-network", data))
	t.Cleanup(func() { must(t, nd.SetConflist(context.Background(), "cluster", []byte(node.DefaultConflist))) })

	pod := createPodAnnotated(t, "two", map[string]string{"example.com/hostdev": "2"},
		map[string]string{nadv1.NetworkAttachmentAnnot: "netdev-net@net1, netdev-net@net2"})
	waitRunning(t, pod)
	devs := podDevices(t, pod, "example.com/hostdev")
	if len(devs) != 2 || devs[0] == devs[1] {
		t.Fatalf("PodResources lists %v for the pod, want two devices", devs)
	}
	for _, d := range devs {
		if _, err := netlink.LinkByName(d); err == nil {
			t.Errorf("%s, one of the pod's devices, is still in the host's namespace", d)
		}
	}
	for _, ifName := range []string{"net1", "net2"} {
		networkStatus(t, pod, "default/netdev-net", ifName)
	}
	deletePod(t, pod)
	for _, d := range devs {
		waitFor(t, d+" back on the host", func(context.Context) error {
			_, err := netlink.LinkByName(d)
			return err
		})
	}
	if left := files(t, nd.HostPath("/run/k8s.cni.cncf.io/devinfo/cni")); len(left) > 0 {
		t.Errorf("CNI device-info files left: %v", left)
	}
}
