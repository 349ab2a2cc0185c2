package dpmode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/vishvananda/netlink"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// hostDevice runs the real host-device CNI plugin.
func hostDevice(t *testing.T, pluginDir, command, device string, netns ns.NetNS) {
	t.Helper()
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"moved-test","type":"host-device","device":%q}`, device)
	cmd := exec.Command(filepath.Join(pluginDir, "host-device"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID=moved-test", "CNI_NETNS="+netns.Path(),
		"CNI_IFNAME=net1", "CNI_PATH="+pluginDir)
	cmd.Stdin = bytes.NewBufferString(conf)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("host-device %s %s: %v: %s", command, device, err, out)
	}
}

func TestVethMovedByHostDeviceStaysInUse(t *testing.T) {
	plugins := testenv.CNIPlugins(t)
	f := newFixture(t)
	f.run()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	alloc, err := f.node.AddPod(ctx, kubeletsim.PodSpec{Namespace: "ns", Name: "veth-pod", Containers: []kubeletsim.ContainerSpec{
		{Name: "c", Requests: []kubeletsim.ResourceRequest{{Resource: netdevtest.ResVeth, Count: 1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	dev := alloc.Devices(netdevtest.ResVeth)[0]
	podNS := testenv.NetNS(t)

	hostDevice(t, plugins, "ADD", dev, podNS)
	// The move is reported (RTM_DELLINK with IFLA_NEW_NETNSID): after it is
	// handled the device must still be listed and healthy.
	f.waitMoveSeen(dev)
	if h := health(f.node.Resources()[netdevtest.ResVeth], dev); h != pluginapi.Healthy {
		t.Fatalf("veth %s moved into a pod: node sees %s", dev, h)
	}

	// DEL moves it back; it is a host interface again.
	hostDevice(t, plugins, "DEL", dev, podNS)
	f.waitNode("back from the pod", func(r map[string][]kubeletsim.Device) bool {
		return health(r[netdevtest.ResVeth], dev) == pluginapi.Healthy && kubeletsim.CountHealthy(r[netdevtest.ResVeth]) == 2
	})

	// Moved again, then the pod's namespace is destroyed: the pair dies.
	hostDevice(t, plugins, "ADD", dev, podNS)
	f.waitMoveSeen(dev)
	testenv.RemoveNetNS(t, podNS)
	f.waitNode("pair destroyed with the pod namespace", func(r map[string][]kubeletsim.Device) bool {
		return health(r[netdevtest.ResVeth], f.VethPrefix+"a") == "absent" && health(r[netdevtest.ResVeth], f.VethPrefix+"b") == "absent"
	})
}

// waitMoveSeen makes sure the source has handled the move of dev: netlink
// events arrive in order, so once a veth pair created after the move is on
// the node, the move's RTM_DELLINK was handled and rescanned before it.
func (f *fixture) waitMoveSeen(dev string) {
	f.t.Helper()
	f.witnesses++
	a, b := fmt.Sprintf("%sw%d", f.VethPrefix, f.witnesses), fmt.Sprintf("%sx%d", f.VethPrefix, f.witnesses)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		if l, err := netlink.LinkByName(a); err == nil {
			netlink.LinkDel(l)
		}
	})
	f.waitNode("witness "+a, func(r map[string][]kubeletsim.Device) bool {
		return health(r[netdevtest.ResVeth], a) == pluginapi.Healthy
	})
	if l, err := netlink.LinkByName(dev); err == nil {
		f.t.Fatalf("%s still in the host namespace (%v)", dev, l.Attrs().Index)
	}
	// Delete the witness again: it stays listed Unhealthy, or leaves the
	// list when a busy host made the socket lose its RTM_DELLINK (the counts
	// below count the healthy devices only).
	l, _ := netlink.LinkByName(a)
	netlink.LinkDel(l)
	f.waitNode("witness "+a+" deleted", func(r map[string][]kubeletsim.Device) bool {
		return health(r[netdevtest.ResVeth], a) != pluginapi.Healthy && health(r[netdevtest.ResVeth], b) != pluginapi.Healthy
	})
}
