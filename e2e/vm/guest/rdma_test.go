//go:build vmguest

package guest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// rdmaLink adds a soft-RoCE device on the netdev with iproute2's rdma (as an
// administrator does); the test's end deletes it.
func rdmaLink(t *testing.T, name, netdev string) {
	t.Helper()
	rdma := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "rdma", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("rdma %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	e2etest.Must(t, rdma("link", "add", name, "type", "rxe", "netdev", netdev))
	t.Cleanup(func() { _ = rdma("link", "delete", name) })
}

// A VF with a soft-RoCE link (rdma_rxe) is the only VF of an isRdma resource: a pod
// gets its /dev/infiniband verbs node and rdma_cm with it, and its device-info (the
// device plugin's, then the pod's through devplumb) names the RDMA device.
func TestRDMAVFHasItsVerbsNodes(t *testing.T) {
	p := pfs(t)[0]
	vfs := p.setVFs(t, 2)
	netdev := vfNetdevs(vfs[0])[0]
	rdmaLink(t, "rxe0", netdev)
	verbs, _ := filepath.Glob("/sys/class/infiniband_verbs/uverbs*")
	if len(verbs) != 1 {
		t.Fatalf("uverbs devices after rdma link add: %v", verbs)
	}
	uverbs := "/dev/infiniband/" + filepath.Base(verbs[0])
	for _, node := range []string{uverbs, "/dev/infiniband/rdma_cm"} {
		if _, err := os.Stat(node); err != nil {
			t.Fatalf("the kernel made no %s: %v", node, err)
		}
	}
	const res = "devplumb.io/vf-rdma"
	n := startNode(t, resource{res, map[string]any{"pfNames": []string{p.netdev}, "isRdma": true}})
	n.devices(res, allHealthy(vfs[:1]))
	if _, err := n.addPod("two", res, 2); err == nil {
		t.Fatal("a pod got two VFs of an isRdma resource where one VF has RDMA")
	}

	alloc, err := n.addPod("roce", res, 1)
	e2etest.Must(t, err)
	var paths []string
	for _, d := range alloc.Containers[0].Resources[0].Response.Devices {
		paths = append(paths, d.HostPath)
	}
	if !slices.Contains(paths, uverbs) || !slices.Contains(paths, "/dev/infiniband/rdma_cm") {
		t.Errorf("Allocate response devices %v, want %s and /dev/infiniband/rdma_cm", paths, uverbs)
	}
	t.Logf("VF %s (netdev %s, soft-RoCE rxe0): Allocate devices %v", vfs[0], netdev, paths)

	conf := n.network("roce-net", res, "10.57.0.2/24")
	netns := testenv.NetNS(t)
	if r := n.cni("ADD", "roce", netns.Path(), "net1", conf); r.Code != 0 {
		t.Fatalf("ADD: %+v", r)
	}
	file, err := devinfo.NewStore(n.devinfoDir()).CNIPath(devinfo.CNIFileName("roce-net", "infra-roce", "net1"))
	e2etest.Must(t, err)
	raw, err := os.ReadFile(file)
	e2etest.Must(t, err)
	if !strings.Contains(string(raw), `"rdma-device": "rxe0"`) || !strings.Contains(string(raw), vfs[0]) {
		t.Errorf("the pod's device-info %s, want VF %s with rdma-device rxe0", raw, vfs[0])
	}
	if r := n.cni("DEL", "roce", netns.Path(), "net1", conf); r.Code != 0 {
		t.Fatalf("DEL: %+v", r)
	}
	n.delPod("roce")
}
