package plugin

import (
	"encoding/json"
	"net"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
)

// reference is what devplumb built with the NAD client before: the entry of the
// sandbox interface ifName, else one over the whole result named ifName.
func reference(t *testing.T, r types.Result, network, ifName string, info *nadv1.DeviceInfo) *nadv1.NetworkStatus {
	entries, err := nadutils.CreateNetworkStatuses(r, network, false, info)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Interface == ifName {
			return e
		}
	}
	e, err := nadutils.CreateNetworkStatus(r, network, false, info)
	if err != nil {
		t.Fatal(err)
	}
	e.Interface = ifName
	return e
}

func ipc(cidr string, iface *int, gw string) *current.IPConfig {
	ip, n, _ := net.ParseCIDR(cidr)
	n.IP = ip
	c := &current.IPConfig{Address: *n, Interface: iface}
	if gw != "" {
		c.Gateway = net.ParseIP(gw)
	}
	return c
}

func TestEntryMatchesNADClient(t *testing.T) {
	zero, one, two := 0, 1, 2
	_, def, _ := net.ParseCIDR("0.0.0.0/0")
	_, other, _ := net.ParseCIDR("10.9.0.0/16")
	routes := []*types.Route{{Dst: *def, GW: net.ParseIP("10.1.0.1")}, {Dst: *other, GW: net.ParseIP("10.1.0.2")}}
	dnsConf := types.DNS{Nameservers: []string{"10.0.0.10"}, Search: []string{"svc"}}
	info := &nadv1.DeviceInfo{Type: "pci", Version: "1.1.0", Pci: &nadv1.PciDevice{PciAddress: "0000:01:00.1"}}
	results := map[string]*current.Result{
		"empty": {CNIVersion: "1.0.0"},
		"bridge": {CNIVersion: "1.0.0", Interfaces: []*current.Interface{
			{Name: "dpbr0", Mac: "02:00:00:00:00:01"},
			{Name: "veth1", Mac: "02:00:00:00:00:02"},
			{Name: "net1", Mac: "02:00:00:00:00:03", Mtu: 1400, Sandbox: "/var/run/netns/x"}},
			IPs: []*current.IPConfig{ipc("10.1.0.5/16", &two, "10.1.0.1")}, Routes: routes, DNS: dnsConf},
		"one iface, other name": {CNIVersion: "1.0.0", Interfaces: []*current.Interface{
			{Name: "eth7", Mac: "02:00:00:00:00:04", Sandbox: "/var/run/netns/x"}},
			IPs: []*current.IPConfig{ipc("10.2.0.5/24", nil, "")}},
		"two sandbox ifaces": {CNIVersion: "1.0.0", Interfaces: []*current.Interface{
			{Name: "net1", Mac: "02:00:00:00:00:05", Sandbox: "/x"},
			{Name: "net2", Mac: "02:00:00:00:00:06", Sandbox: "/x"}},
			IPs: []*current.IPConfig{ipc("10.3.0.1/24", &zero, ""), ipc("10.3.0.2/24", &one, ""), ipc("10.3.0.3/24", nil, "")}},
		"no sandbox iface": {CNIVersion: "1.0.0", Interfaces: []*current.Interface{{Name: "a"}, {Name: "b"}},
			IPs: []*current.IPConfig{ipc("10.4.0.1/24", nil, "")}, Routes: routes},
	}
	for name, r := range results {
		for _, ifName := range []string{"net1", "net2"} {
			for _, di := range []*nadv1.DeviceInfo{nil, info} {
				got, err := networkStatus(r, "ns/fast", ifName, di)
				if err != nil {
					t.Fatalf("%s/%s: %v", name, ifName, err)
				}
				want := reference(t, r, "ns/fast", ifName, di)
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				if string(g) != string(w) {
					t.Errorf("%s/%s:\n got %s\nwant %s", name, ifName, g, w)
				}
			}
		}
	}
}

func TestEntryRejectsUnconvertibleResult(t *testing.T) {
	if _, err := networkStatus(&current.Result{CNIVersion: "9.9.9"}, "n", "net1", nil); err == nil {
		t.Fatal("a result of an unknown version was accepted")
	}
}
