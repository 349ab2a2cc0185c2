//go:build vmguest

package guest

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/testenv"
)

const vfRes, vfResB = "devplumb.io/vf", "devplumb.io/vf-b"

// vfNIC is a VF's netdev as the host had it before a pod took it.
type vfNIC struct{ name, mac string }

// hostNICs are the VFs' netdevs (name, MAC) in the host netns.
func hostNICs(t *testing.T, vfs []string) map[string]vfNIC {
	t.Helper()
	out := map[string]vfNIC{}
	for _, vf := range vfs {
		names := vfNetdevs(vf)
		if len(names) != 1 {
			t.Fatalf("VF %s netdevs in the host netns: %v", vf, names)
		}
		l, err := netlink.LinkByName(names[0])
		e2etest.Must(t, err)
		out[vf] = vfNIC{name: names[0], mac: l.Attrs().HardwareAddr.String()}
	}
	return out
}

// The whole path with real VFs: netdev-dp's pci source selects PF0's VFs by vendor,
// device, driver and PF name (and PF1's by PF name alone), with the NUMA node the kernel
// gives them; two pods get two VFs each from nodesim, never the same; devplumb
// delegates to host-device with each VF's PCI address, which moves the VF's own netdev
// into the pod with its network's IP; the device-info says pci with the VF's address
// and its PF as the kernel links them; network-status (in devplumb's state) and
// devplumbctl inspect show them; DEL gives each VF back to the host under its name.
func TestSRIOVVFsThroughThePath(t *testing.T) {
	p := pfs(t)
	vfs0, vfs1 := p[0].setVFs(t, 4), p[1].setVFs(t, 2)
	nics := hostNICs(t, append(slices.Clone(vfs0), vfs1...))
	n := startNode(t,
		resource{vfRes, map[string]any{"vendors": []string{"8086"}, "devices": []string{"10ca"},
			"drivers": []string{"igbvf"}, "pfNames": []string{p[0].netdev}}},
		resource{vfResB, map[string]any{"pfNames": []string{p[1].netdev}}})
	for res, want := range map[string]pf{vfRes: p[0], vfResB: p[1]} {
		for _, d := range n.devices(res, allHealthy(map[string][]string{vfRes: vfs0, vfResB: vfs1}[res])) {
			if !slices.Equal(d.NUMANodes, []int64{int64(want.numa)}) {
				t.Errorf("%s device %s NUMA nodes %v, want the kernel's %d", res, d.ID, d.NUMANodes, want.numa)
			}
		}
	}

	a, err := n.addPod("a", vfRes, 2)
	e2etest.Must(t, err)
	b, err := n.addPod("b", vfRes, 2)
	e2etest.Must(t, err)
	gotA, gotB := a.Containers[0].Resources[0].DeviceIDs, b.Containers[0].Resources[0].DeviceIDs
	if len(gotA) != 2 || len(gotB) != 2 || slices.ContainsFunc(gotA, func(id string) bool { return slices.Contains(gotB, id) }) {
		t.Fatalf("pods a %v and b %v do not have two VFs each, apart", gotA, gotB)
	}
	if c, err := n.addPod("c", vfRes, 1); err == nil {
		t.Fatalf("a third pod got a VF of four given out: %+v", c)
	}

	nets := []map[string]any{n.network("sriov-1", vfRes, "10.56.1.2/24"), n.network("sriov-2", vfRes, "10.56.2.2/24")}
	for _, pod := range []struct {
		name string
		vfs  []string
	}{{"a", gotA}, {"b", gotB}} {
		netns := testenv.NetNS(t)
		for i, conf := range nets {
			ifName := []string{"net1", "net2"}[i]
			if res := n.cni("ADD", pod.name, netns.Path(), ifName, conf); res.Code != 0 {
				t.Fatalf("pod %s ADD %s: %+v", pod.name, ifName, res)
			}
			vf := checkAttached(t, n, netns, pod.name, ifName, conf, pod.vfs, p[0].addr, nics)
			if !strings.Contains(n.devplumbctl("inspect", "--root", n.root), vf) {
				t.Errorf("devplumbctl inspect does not show VF %s", vf)
			}
		}
		for i, conf := range nets {
			if res := n.cni("DEL", pod.name, netns.Path(), []string{"net1", "net2"}[i], conf); res.Code != 0 {
				t.Fatalf("pod %s DEL: %+v", pod.name, res)
			}
		}
		for _, vf := range pod.vfs {
			if got := hostNICs(t, []string{vf})[vf]; got != nics[vf] {
				t.Errorf("VF %s back on the host as %+v, had %+v", vf, got, nics[vf])
			}
		}
		n.delPod(pod.name)
	}
	if st := records(t, n); len(st) != 0 {
		t.Errorf("attachments left after DEL: %+v", st)
	}
}

// checkAttached checks one ADD: the pod's ifName is one of the pod's VFs (by MAC), its
// netdev is gone from the host, the address is set, and the CNI device-info file and the
// network-status entry describe that VF and its PF. It returns the VF's address.
func checkAttached(t *testing.T, n *node, netns ns.NetNS, pod, ifName string, conf map[string]any, podVFs []string, pfAddr string, nics map[string]vfNIC) string {
	t.Helper()
	var mac string
	var addrs []netlink.Addr
	e2etest.Must(t, netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(ifName)
		if err != nil {
			return err
		}
		mac = l.Attrs().HardwareAddr.String()
		addrs, err = netlink.AddrList(l, netlink.FAMILY_V4)
		return err
	}))
	vf := ""
	for _, id := range podVFs {
		if nics[id].mac == mac {
			vf = id
		}
	}
	if vf == "" {
		t.Fatalf("pod %s %s (MAC %s) is none of its VFs %v", pod, ifName, mac, podVFs)
	}
	if left := vfNetdevs(vf); len(left) != 0 {
		t.Errorf("VF %s still has netdevs %v in the host netns", vf, left)
	}
	want := conf["delegate"].(map[string]any)["ipam"].(map[string]any)["addresses"].([]any)[0].(map[string]any)["address"]
	if len(addrs) != 1 || addrs[0].IPNet.String() != want {
		t.Errorf("pod %s %s addresses %v, want %v", pod, ifName, addrs, want)
	}
	file, err := devinfo.NewStore(n.devinfoDir()).CNIPath(devinfo.CNIFileName(conf["name"].(string), "infra-"+pod, ifName))
	e2etest.Must(t, err)
	raw, err := os.ReadFile(file)
	e2etest.Must(t, err)
	var info devinfo.DeviceInfo
	e2etest.Must(t, json.Unmarshal(raw, &info))
	if info.Type != devinfo.TypePCI || info.Pci == nil || info.Pci.PciAddress != vf || info.Pci.PfPciAddress != pfAddr {
		t.Errorf("pod %s %s device-info %s, want pci %s of PF %s", pod, ifName, raw, vf, pfAddr)
	}
	for _, r := range records(t, n) {
		if r.Pod.Name == pod && r.IfName == ifName {
			if s := r.NetworkStatus; s == nil || s.Mac != mac || s.DeviceInfo == nil || s.DeviceInfo.Pci.PciAddress != vf {
				t.Errorf("pod %s %s network-status %+v, want MAC %s and VF %s", pod, ifName, s, mac, vf)
			}
			return vf
		}
	}
	t.Fatalf("no attachment record of pod %s %s", pod, ifName)
	return ""
}

func records(t *testing.T, n *node) []*attachment.Record {
	t.Helper()
	all, err := attachment.New(n.stateDir()).List()
	e2etest.Must(t, err)
	return all
}
