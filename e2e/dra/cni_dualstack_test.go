package dra_test

import (
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// A dual-stack attachment (host-local with an IPv4 and an IPv6 range): the
// network-status entry lists both addresses, the claim's networkData both
// CIDRs, the device-info is the driver's as in IPv4 alone, and DEL clears both
// statuses and returns both leases.
func TestCNIDualStack(t *testing.T) {
	n := newCNINode(t)
	dev := n.veth()
	n.slice(cniDev{"dev-0", attrs(dev, cniResource)})
	claimName := "claim-" + cniRandom()
	pod := n.pod("pod-"+cniRandom(), claimName, false)
	n.claim(claimName, nil, []*corev1.Pod{pod}, "dev-0")
	n.report(pod, claimName, []string{"dev-0"}, []string{dev})
	n.driverEntry(claimName, "dev-0")
	netns := testenv.NetNS(t).Path()
	leases := filepath.Join(n.dir, "ipam")
	conf := n.conf(map[string]any{"resourceName": cniResource, "delegate": map[string]any{"type": "host-device",
		"ipam": map[string]any{"type": "host-local", "dataDir": leases, "ranges": []any{
			[]any{map[string]any{"subnet": "198.51.100.0/24"}},
			[]any{map[string]any{"subnet": "2001:db8:77::/64"}},
		}}}})

	if res := n.run("ADD", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("ADD: %+v", res)
	}
	ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name)
	if len(ns) != 1 || len(ns[0].IPs) != 2 || !reflect.DeepEqual(ns[0].DeviceInfo, n.info) {
		t.Fatalf("network-status %+v: want one entry with two IPs and the driver's device-info %+v", ns, n.info)
	}
	v4, v6 := net.ParseIP(ns[0].IPs[0]), net.ParseIP(ns[0].IPs[1])
	if v4 == nil || v4.To4() == nil || v6 == nil || v6.To4() != nil ||
		!mustCIDR(t, "198.51.100.0/24").Contains(v4) || !mustCIDR(t, "2001:db8:77::/64").Contains(v6) {
		t.Fatalf("network-status IPs %v: want an address of 198.51.100.0/24, then one of 2001:db8:77::/64", ns[0].IPs)
	}
	want := &resourcev1.NetworkDeviceData{InterfaceName: "net1", HardwareAddress: ns[0].Mac,
		IPs: []string{ns[0].IPs[0] + "/24", ns[0].IPs[1] + "/64"}}
	if st := deviceStatus(t, claimName, n.driver, "dev-0"); st == nil || !reflect.DeepEqual(st.NetworkData, want) {
		t.Fatalf("claim status entry %+v: want networkData %+v", st, want)
	}
	leased := func(ip string) bool { return slices.Contains(testenv.Files(t, leases), filepath.Join(n.network, ip)) }
	if !leased(ns[0].IPs[0]) || !leased(ns[0].IPs[1]) {
		t.Fatalf("host-local leases %v: want both addresses of %v", testenv.Files(t, leases), ns[0].IPs)
	}

	if res := n.run("DEL", conf, netns, pod, "net1"); res.Code != 0 {
		t.Fatalf("DEL: %+v", res)
	}
	if ns := e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name); len(ns) != 0 {
		t.Errorf("network-status after DEL: %+v", ns)
	}
	if st := deviceStatus(t, claimName, n.driver, "dev-0"); st == nil || st.NetworkData != nil {
		t.Errorf("claim status entry after DEL: %+v", st)
	}
	for _, ip := range ns[0].IPs {
		if leased(ip) {
			t.Errorf("lease of %s kept after DEL", ip)
		}
	}
}

func mustCIDR(t *testing.T, s string) *net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	e2etest.Must(t, err)
	return n
}
