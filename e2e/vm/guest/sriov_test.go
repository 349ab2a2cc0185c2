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

const vfRes, vfResB, vfResC = "devplumb.io/vf", "devplumb.io/vf-b", "devplumb.io/vf-c"

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

// The whole path with real VFs: netdev-dp's pci source selects VFs 0-3 of PF0's five by
// vendor, device, driver and PF name with a VF index range, VF 4 by the PF's PCI
// address with a range, and all three of PF1's by its name alone, each with the NUMA
// node the kernel gives it; two pods get two VFs each from nodesim, never the same; devplumb
// delegates to host-device with each VF's PCI address, which moves the VF's own netdev
// into the pod with its network's IP; the device-info says pci with the VF's address
// and its PF as the kernel links them; network-status (in devplumb's state) and
// devplumbctl inspect show them; DEL gives each VF back to the host under its name.
func TestSRIOVVFsThroughThePath(t *testing.T) {
	p := pfs(t)
	vfs0, vfs1 := p[0].setVFs(t, 5), p[1].setVFs(t, 3)
	nics := hostNICs(t, append(slices.Clone(vfs0), vfs1...))
	t.Logf("PF %s (%s, NUMA node %d) VFs %v; PF %s (%s, NUMA node %d) VFs %v", p[0].addr, p[0].netdev, p[0].numa, vfs0, p[1].addr, p[1].netdev, p[1].numa, vfs1)
	n := startNode(t,
		resource{vfRes, map[string]any{"vendors": []string{"8086"}, "devices": []string{"10ca"},
			"drivers": []string{"igbvf"}, "pfNames": []string{p[0].netdev + "#0-3"}}},
		resource{vfResB, map[string]any{"pfNames": []string{p[1].netdev}}},
		resource{vfResC, map[string]any{"rootDevices": []string{p[0].addr + "#4"}}})
	for _, r := range []struct {
		res string
		pf  pf
		vfs []string
	}{{vfRes, p[0], vfs0[:4]}, {vfResB, p[1], vfs1}, {vfResC, p[0], vfs0[4:]}} {
		for _, d := range n.devices(r.res, allHealthy(r.vfs)) {
			if !slices.Equal(d.NUMANodes, []int64{int64(r.pf.numa)}) {
				t.Errorf("%s device %s NUMA nodes %v, want the kernel's %d", r.res, d.ID, d.NUMANodes, r.pf.numa)
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
	t.Logf("pod a has VFs %v, pod b %v", gotA, gotB)

	nets := []map[string]any{n.network("sriov-1", vfRes, "10.56.1.2/24"), n.network("sriov-2", vfRes, "10.56.2.2/24")}
	ifNames := []string{"net1", "net2"}
	pods := []struct {
		name string
		vfs  []string
		ns   ns.NetNS
	}{{"a", gotA, testenv.NetNS(t)}, {"b", gotB, testenv.NetNS(t)}}
	for _, pod := range pods {
		for i, conf := range nets {
			if res := n.cni("ADD", pod.name, pod.ns.Path(), ifNames[i], conf); res.Code != 0 {
				t.Fatalf("pod %s ADD %s: %+v", pod.name, ifNames[i], res)
			}
			checkAttached(t, n, pod.ns, pod.name, ifNames[i], conf, pod.vfs, p[0].addr, nics)
		}
	}
	out := n.devplumbctl("inspect", "--root", n.root)
	for _, vf := range append(slices.Clone(gotA), gotB...) {
		if !strings.Contains(out, vf) {
			t.Errorf("devplumbctl inspect does not show VF %s", vf)
		}
	}
	t.Logf("devplumbctl inspect with both pods attached:\n%s", out)
	for _, pod := range pods {
		for i, conf := range nets {
			if res := n.cni("DEL", pod.name, pod.ns.Path(), ifNames[i], conf); res.Code != 0 {
				t.Fatalf("pod %s DEL %s: %+v", pod.name, ifNames[i], res)
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
	want := conf["delegate"].(map[string]any)["ipam"].(map[string]any)["addresses"].([]any)[0].(map[string]any)["address"].(string)
	mac := podNIC(t, netns, ifName, want)
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
	file, err := devinfo.NewStore(n.devinfoDir()).CNIPath(devinfo.CNIFileName(conf["name"].(string), "infra-"+pod, ifName))
	e2etest.Must(t, err)
	raw, err := os.ReadFile(file)
	e2etest.Must(t, err)
	var info devinfo.DeviceInfo
	e2etest.Must(t, json.Unmarshal(raw, &info))
	t.Logf("pod %s %s: VF %s (MAC %s), device-info %s", pod, ifName, vf, mac, raw)
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
