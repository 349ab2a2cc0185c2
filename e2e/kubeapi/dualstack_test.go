package kubeapi_test

import (
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// A device-plugin device attached dual-stack (host-local with an IPv4 and an
// IPv6 range), against the real API server: devplumb's network-status entry
// lists both addresses beside the device-info, the CNI device-info file is the
// DP file's, and DEL removes the entry, the file and both leases.
func TestDevplumbBinaryDualStack(t *testing.T) {
	n := newNode(t)
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "dp-dualstack", nodeName, nil)
	e2etest.Must(t, err)
	n.givePod(pod.Name)
	netns := testenv.NetNS(t).Path()
	args := n.podArgs(pod.Name, string(pod.UID))
	leases := filepath.Join(n.dir, "ipam")
	conf := n.conf(map[string]any{"delegate": map[string]any{"type": "host-device",
		"ipam": map[string]any{"type": "host-local", "dataDir": leases, "ranges": []any{
			[]any{map[string]any{"subnet": "2001:db8:78::/64"}},
			[]any{map[string]any{"subnet": "198.51.100.0/24"}},
		}}}})

	if res := n.devplumb(t, "ADD", conf, netns, args); res.Code != 0 {
		t.Fatalf("ADD: %+v", res)
	}
	got := e2etest.NetworkStatus(t, srv.Client, "default", pod.Name)
	if len(got) != 1 || len(got[0].IPs) != 2 || !reflect.DeepEqual(got[0].DeviceInfo, n.info) {
		t.Fatalf("network-status %+v: want devplumb's entry with two IPs and the device-info %+v", got, n.info)
	}
	v6, v4 := net.ParseIP(got[0].IPs[0]), net.ParseIP(got[0].IPs[1])
	_, r6, _ := net.ParseCIDR("2001:db8:78::/64")
	_, r4, _ := net.ParseCIDR("198.51.100.0/24")
	if v6 == nil || v6.To4() != nil || !r6.Contains(v6) || v4 == nil || !r4.Contains(v4) {
		t.Fatalf("network-status IPs %v: want an address of %s, then one of %s, in the ranges' order", got[0].IPs, r6, r4)
	}
	cniDir := filepath.Join(n.dir, "devinfo", "cni")
	cniFiles := testenv.Files(t, cniDir)
	if len(cniFiles) != 1 {
		t.Fatalf("CNI device-info files %v: want the attachment's one", cniFiles)
	}
	cniFile := filepath.Join(cniDir, cniFiles[0])
	info, err := devinfo.ReadFile(cniFile)
	if err != nil || !reflect.DeepEqual(info, n.info) {
		t.Fatalf("CNI device-info file %s: %+v, %v; want the DP file's %+v", cniFile, info, err, n.info)
	}
	leaseFiles := testenv.Files(t, leases)
	for _, ip := range got[0].IPs {
		if !slices.Contains(leaseFiles, filepath.Join(n.network, ip)) {
			t.Fatalf("host-local leases %v: no lease of %s", leaseFiles, ip)
		}
	}

	if res := n.devplumb(t, "DEL", conf, netns, args); res.Code != 0 {
		t.Fatalf("DEL: %+v", res)
	}
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, "default", pod.Name))
	if _, err := devinfo.ReadFile(cniFile); err == nil {
		t.Errorf("CNI device-info file %s kept after DEL", cniFile)
	}
	for _, ip := range got[0].IPs {
		if slices.Contains(testenv.Files(t, leases), filepath.Join(n.network, ip)) {
			t.Errorf("lease of %s kept after DEL", ip)
		}
	}
}
