//go:build vmguest

package guest

import (
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
)

// With VFs on both NUMA nodes in one resource (three of PF0 on node 0, two of PF1 on
// node 1, the nodes read from their numa_node), netdev-dp's GetPreferredAllocation
// keeps a request on one node: the node of the devices the kubelet must include, and
// without any, the node that fits most tightly; nodesim, which asks it as the kubelet
// does, gives a pod the VFs it prefers.
func TestPreferredAllocationFollowsNUMA(t *testing.T) {
	p := pfs(t)
	node0, node1 := p[0].setVFs(t, 3), p[1].setVFs(t, 2)
	const res = "devplumb.io/vf-numa"
	n := startNode(t, resource{res, map[string]any{"pfNames": []string{p[0].netdev, p[1].netdev}}})
	all := append(slices.Clone(node0), node1...)
	n.devices(res, allHealthy(all))

	conn, err := grpc.NewClient("unix://"+filepath.Join(n.root, "device-plugins", deviceplugin.EndpointName(res)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	e2etest.Must(t, err)
	defer conn.Close()
	dp := pluginapi.NewDevicePluginClient(conn)
	preferred := func(must []string, size int32) []string {
		resp, err := dp.GetPreferredAllocation(e2etest.Ctx(t), &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
				AvailableDeviceIDs: all, MustIncludeDeviceIDs: must, AllocationSize: size}}})
		e2etest.Must(t, err)
		return sorted(resp.ContainerResponses[0].DeviceIDs)
	}
	for _, c := range []struct {
		what string
		must []string
		size int32
		want []string
	}{
		{"must include a node 1 VF", node1[1:], 2, node1},
		{"must include a node 0 VF", node0[2:], 2, sorted([]string{node0[0], node0[2]})},
		{"none to include: the tighter node", nil, 2, node1},
		{"none to include, three: node 0", nil, 3, node0},
	} {
		if got := preferred(c.must, c.size); !slices.Equal(got, c.want) {
			t.Errorf("%s (%d of %v): preferred %v, want %v", c.what, c.size, all, got, c.want)
		}
	}

	a, err := n.addPod("numa-a", res, 2)
	e2etest.Must(t, err)
	b, err := n.addPod("numa-b", res, 3)
	e2etest.Must(t, err)
	gotA, gotB := sorted(a.Containers[0].Resources[0].DeviceIDs), sorted(b.Containers[0].Resources[0].DeviceIDs)
	if !slices.Equal(gotA, node1) || !slices.Equal(gotB, node0) {
		t.Errorf("pods got %v and %v, want node 1's %v and node 0's %v", gotA, gotB, node1, node0)
	}
	t.Logf("pod of two: %v (NUMA %v); pod of three: %v (NUMA %v)", gotA, a.Containers[0].Resources[0].NUMANodes, gotB, b.Containers[0].Resources[0].NUMANodes)
}
