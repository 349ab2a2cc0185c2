// Package plugintest is the node devplumb's ADD and DEL in two steps are
// tested on, by pkg/cni/plugin and by the node agent (pkg/cni/agent) alike:
// pod default/p1 with a real netns, holding veth ends as devices of
// example.com/vf (their DP device-info files, a real PodResources server),
// and the real CNI plugins to delegate to.
package plugintest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// Resource is the resource the pod's devices are of.
const Resource = "example.com/vf"

// Node is one node with pod default/p1.
type Node struct {
	t       testing.TB
	Root    string // the config's stateDir is Root/state, its deviceInfoDir Root/devinfo
	CNIPath string // the real CNI plugins
	Pod     ns.NetNS
	// Devs are the pod's devices (host ends of veth pairs), in the order
	// PodResources lists them.
	Devs         []string
	PodResources *podresourcestest.Server
}

// NewNode makes a node whose pod holds devices veth ends; opts configure
// its PodResources server (by default limited as the kubelet's is).
func NewNode(t testing.TB, devices int, opts ...podresourcestest.ServerOption) *Node {
	t.Helper()
	n := &Node{t: t, CNIPath: testenv.CNIPlugins(t), Root: t.TempDir(), Pod: testenv.NetNS(t)}
	store := devinfo.NewStore(filepath.Join(n.Root, "devinfo"))
	for i := range devices {
		dev := testenv.VethPair(t, "dps") + "a"
		info := &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version,
			Pci: &devinfo.PciDevice{PciAddress: fmt.Sprintf("0000:01:%02x.0", i)}}
		if err := store.WriteDP(Resource, dev, info); err != nil {
			t.Fatal(err)
		}
		n.Devs = append(n.Devs, dev)
	}
	n.PodResources = podresourcestest.NewServer(t, opts...)
	n.PodResources.SetPod(&v1.PodResources{Namespace: "default", Name: "p1", Containers: []*v1.ContainerResources{{
		Name: "app", Devices: []*v1.ContainerDevices{{ResourceName: Resource, DeviceIds: n.Devs}},
	}}})
	return n
}

// Conf is network fast-net's devplumb config on this node, delegating to
// delegate; tests add and change keys.
func (n *Node) Conf(delegate map[string]any) map[string]any {
	return map[string]any{"cniVersion": "1.0.0", "name": "fast-net", "type": "devplumb", "resourceName": Resource,
		"podResourcesSocket": n.PodResources.Socket, "deviceInfoDir": filepath.Join(n.Root, "devinfo"),
		"stateDir": filepath.Join(n.Root, "state"), "injectDeviceID": []string{"device"}, "delegate": delegate}
}

// Records are the attachment records in stateDir.
func Records(t testing.TB, stateDir string) []*attachment.Record {
	t.Helper()
	all, err := attachment.New(stateDir).List()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// Records are the node's attachment records.
func (n *Node) Records() []*attachment.Record { return Records(n.t, filepath.Join(n.Root, "state")) }

// View is what an ADD leaves that must not depend on the path it took: the
// one record, without its timings, and its CNI device-info file.
func (n *Node) View() (attachment.Record, string) {
	n.t.Helper()
	recs := n.Records()
	if len(recs) != 1 {
		n.t.Fatalf("records %+v, want one", recs)
	}
	rec := *recs[0]
	rec.Phases = nil
	data, err := os.ReadFile(rec.CNIFile)
	if err != nil {
		n.t.Fatal(err)
	}
	return rec, string(data)
}

// InPod reports whether the pod's netns has a link named ifName.
func (n *Node) InPod(ifName string) bool { return testenv.HasLink(n.t, n.Pod, ifName) }

// OnHost reports whether device dev is in the host's netns.
func (n *Node) OnHost(dev string) bool { return testenv.HasLink(n.t, nil, dev) }
