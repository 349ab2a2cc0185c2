package dpmode

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/vishvananda/netlink"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

func ids(devs []kubeletsim.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.ID)
	}
	slices.Sort(out)
	return out
}

func health(devs []kubeletsim.Device, id string) string {
	for _, d := range devs {
		if d.ID == id {
			return d.Health
		}
	}
	return "absent"
}

func TestAdvertisesDescribesAndCleansUp(t *testing.T) {
	f := newFixture(t)
	stop := f.run()
	res := f.node.Resources()
	want := map[string][]string{
		netdevtest.ResVF:    {"0000:01:01.0", "0000:01:01.1", "0000:01:01.2", "0000:01:01.3"},
		netdevtest.ResVeth:  {f.VethPrefix + "a", f.VethPrefix + "b"},
		netdevtest.ResVhost: {"vhu0.sock", "vhu1.sock"},
		netdevtest.ResVDPA:  {"vdpa0"},
	}
	for r, w := range want {
		if got := ids(res[r]); !slices.Equal(got, w) {
			t.Errorf("%s: node has %v, want %v", r, got, w)
		}
	}
	for _, d := range res[netdevtest.ResVF] {
		wantNUMA := int64(1)
		if d.ID >= "0000:01:01.2" {
			wantNUMA = 0
		}
		if d.Health != pluginapi.Healthy || !slices.Equal(d.NUMANodes, []int64{wantNUMA}) {
			t.Errorf("VF %+v", d)
		}
	}

	// Device-info files: every describable device, valid; none for veths.
	store := devinfo.NewStore(f.DevInfoDir)
	for r, w := range want {
		for _, id := range w {
			info, err := store.ReadDP(r, id)
			switch {
			case r == netdevtest.ResVeth && err == nil:
				t.Errorf("veth %s has a device-info file", id)
			case r != netdevtest.ResVeth && err != nil:
				t.Errorf("%s %s: %v", r, id, err)
			case r != netdevtest.ResVeth && devinfo.Validate(info) != nil:
				t.Errorf("%s %s: invalid: %v", r, id, devinfo.Validate(info))
			}
		}
	}
	vf, _ := store.ReadDP(netdevtest.ResVF, "0000:01:01.2")
	if vf == nil || vf.Type != devinfo.TypePCI || vf.Pci.PfPciAddress != "0000:01:00.0" {
		t.Errorf("VF device-info %+v", vf)
	}

	// CDI specs: the CDI library's own cache loads them without errors.
	cache, err := cdi.NewCache(cdi.WithSpecDirs(f.CDIDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("CDI errors: %v", errs)
	}
	if n := len(cache.ListDevices()); n != 9 {
		t.Errorf("CDI devices %v, want 9", cache.ListDevices())
	}
	for _, e := range testenv.Files(t, f.CDIDir) {
		if st, _ := os.Stat(filepath.Join(f.CDIDir, e)); st.Mode().Perm() != 0o644 {
			t.Errorf("CDI spec %s mode %v", e, st.Mode())
		}
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	assertCleanedUp(t, f)
}

// assertCleanedUp checks that nothing of the plugin is left.
func assertCleanedUp(t *testing.T, f *fixture) {
	t.Helper()
	if left := testenv.Files(t, f.DevInfoDir); len(left) != 0 {
		t.Errorf("device-info files left: %v", left)
	}
	if left := testenv.Files(t, f.CDIDir); len(left) != 0 {
		t.Errorf("CDI specs left: %v", left)
	}
	entries, _ := os.ReadDir(f.node.PluginDir())
	for _, e := range entries {
		if e.Name() != "kubelet.sock" {
			t.Errorf("left in plugin dir: %s", e.Name())
		}
	}
}

func TestAllocationResponses(t *testing.T) {
	f := newFixture(t)
	f.run()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	alloc, err := f.node.AddPod(ctx, kubeletsim.PodSpec{Namespace: "ns", Name: "p", Containers: []kubeletsim.ContainerSpec{
		{Name: "c", Requests: []kubeletsim.ResourceRequest{{Resource: netdevtest.ResVF, Count: 2}, {Resource: netdevtest.ResVhost, Count: 1}, {Resource: netdevtest.ResVDPA, Count: 1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(f.CDIDir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, ra := range alloc.Containers[0].Resources {
		r := ra.Response
		env := envName(map[string]string{netdevtest.ResVF: "pci", netdevtest.ResVhost: "vhostuser", netdevtest.ResVDPA: "vdpa"}[ra.Resource], ra.Resource)
		if r.Envs[env] != strings.Join(ra.DeviceIDs, ",") {
			t.Errorf("%s: env %s=%q, want %v", ra.Resource, env, r.Envs[env], ra.DeviceIDs)
		}
		if len(r.CdiDevices) != len(ra.DeviceIDs) {
			t.Errorf("%s: cdi devices %v", ra.Resource, r.CdiDevices)
		}
		var names []string
		for _, c := range r.CdiDevices {
			names = append(names, c.Name)
			if cache.GetDevice(c.Name) == nil {
				t.Errorf("%s: CDI device %q not in the CDI cache", ra.Resource, c.Name)
			}
		}
		_, annDevices, err := cdi.ParseAnnotations(r.Annotations)
		if err != nil || !slices.Equal(annDevices, names) {
			t.Errorf("%s: annotations %v: %v (want %v)", ra.Resource, r.Annotations, err, names)
		}
		switch ra.Resource {
		case netdevtest.ResVF:
			// Preferred allocation keeps both on one NUMA node: the tighter
			// fit, two free on each node, lowest node first.
			if !slices.Equal(ra.DeviceIDs, []string{"0000:01:01.2", "0000:01:01.3"}) {
				t.Errorf("VFs %v not from one NUMA node", ra.DeviceIDs)
			}
			var paths []string
			for _, d := range r.Devices {
				paths = append(paths, d.HostPath)
			}
			if !slices.Equal(paths, []string{"/dev/vfio/vfio", "/dev/vfio/42", "/dev/vfio/43"}) {
				t.Errorf("vfio device specs %v", paths)
			}
		case netdevtest.ResVhost:
			sock := filepath.Join(f.SockDir, ra.DeviceIDs[0])
			if len(r.Mounts) != 1 || r.Mounts[0].HostPath != sock || r.Mounts[0].ContainerPath != sock {
				t.Errorf("vhost mounts %v", r.Mounts)
			}
		case netdevtest.ResVDPA:
			if len(r.Devices) != 1 || r.Devices[0].HostPath != "/dev/vhost-vdpa-3" || r.Devices[0].Permissions != "rw" {
				t.Errorf("vdpa device specs %v", r.Devices)
			}
		}
	}
}

// TestHealthChangesReachTheNode: what the sources see reaches the kubelet
// through ListAndWatch. A deleted veth pair, a VF whose PF's link is down,
// a removed socket: each stays listed, Unhealthy, and is Healthy again when
// it is back. A VF gone from sysfs that no pod holds is no longer listed.
func TestHealthChangesReachTheNode(t *testing.T) {
	f := newFixture(t)
	f.run()
	store := devinfo.NewStore(f.DevInfoDir)
	a, b := f.VethPrefix+"a", f.VethPrefix+"b"
	vethHealth := func(want string) func(r map[string][]kubeletsim.Device) bool {
		return func(r map[string][]kubeletsim.Device) bool {
			return len(r[netdevtest.ResVeth]) == 2 && health(r[netdevtest.ResVeth], a) == want && health(r[netdevtest.ResVeth], b) == want
		}
	}
	l, err := netlink.LinkByName(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	f.waitNode("deleted veth pair unhealthy", vethHealth(pluginapi.Unhealthy))
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}); err != nil {
		t.Fatal(err)
	}
	f.waitNode("veth pair back healthy", vethHealth(pluginapi.Healthy))

	// A VF that leaves sysfs, which no pod holds, goes with its file
	// (TestGoneVFsGoUnlessHeld: one a pod holds stays).
	sysfstest.RemovePCI(t, f.Sysfs, "0000:01:01.0")
	f.waitNode("VF gone", func(r map[string][]kubeletsim.Device) bool {
		return health(r[netdevtest.ResVF], "0000:01:01.0") == "absent" && len(r[netdevtest.ResVF]) == 3
	})
	if _, err := store.ReadDP(netdevtest.ResVF, "0000:01:01.0"); err == nil {
		t.Errorf("file of a VF gone from sysfs kept")
	}
	// The PF's link goes down: every VF is unhealthy until it is up again.
	sysfstest.SetOperState(t, f.Sysfs, sysfstest.NodePF, sysfstest.NodePFName, "down")
	f.waitNode("VFs of a PF whose link is down unhealthy", func(r map[string][]kubeletsim.Device) bool {
		return len(r[netdevtest.ResVF]) == 3 && kubeletsim.CountHealthy(r[netdevtest.ResVF]) == 0
	})
	sysfstest.SetOperState(t, f.Sysfs, sysfstest.NodePF, sysfstest.NodePFName, "up")
	f.waitNode("VFs healthy when the PF's link is up", func(r map[string][]kubeletsim.Device) bool {
		return len(r[netdevtest.ResVF]) == 3 && kubeletsim.CountHealthy(r[netdevtest.ResVF]) == 3
	})

	// A new socket is a new device with a file; a removed one turns
	// Unhealthy and keeps its file (a pod may hold it), until it is back.
	l2 := f.Listen("vhu2.sock")
	f.waitNode("new socket listed", func(r map[string][]kubeletsim.Device) bool {
		return kubeletsim.CountHealthy(r[netdevtest.ResVhost]) == 3
	})
	if _, err := store.ReadDP(netdevtest.ResVhost, "vhu2.sock"); err != nil {
		t.Errorf("new socket has no device-info: %v", err)
	}
	l2.Close()
	f.waitNode("removed socket unhealthy", func(r map[string][]kubeletsim.Device) bool {
		return health(r[netdevtest.ResVhost], "vhu2.sock") == pluginapi.Unhealthy && kubeletsim.CountHealthy(r[netdevtest.ResVhost]) == 2
	})
	if _, err := store.ReadDP(netdevtest.ResVhost, "vhu2.sock"); err != nil {
		t.Errorf("device-info of a removed, still listed socket removed: %v", err)
	}
	f.Listen("vhu2.sock")
	f.waitNode("socket back healthy", func(r map[string][]kubeletsim.Device) bool {
		return kubeletsim.CountHealthy(r[netdevtest.ResVhost]) == 3
	})
}

func TestReRegistersAfterNodeRestart(t *testing.T) {
	f := newFixture(t)
	stop := f.run()
	f.node.Stop()
	restarted := time.Now()
	f.startNode()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, r := range []string{netdevtest.ResVF, netdevtest.ResVeth, netdevtest.ResVhost, netdevtest.ResVDPA} {
		if err := f.node.WaitRegistered(ctx, r); err != nil {
			t.Fatalf("%s not registered again within 2s of the restart (%v): %v", r, time.Since(restarted), err)
		}
	}
	// Files of devices that still exist survive the kubelet restart.
	if _, err := devinfo.NewStore(f.DevInfoDir).ReadDP(netdevtest.ResVF, "0000:01:01.0"); err != nil {
		t.Error(err)
	}
	// The node restarts as kubelet 1.37 (kubeletsim): a second registration
	// would be refused and leave the node with a dead connection. A device
	// that appears afterwards must reach it, and a pod must be admitted. The
	// refusals of a second registration came within milliseconds of the first.
	time.Sleep(500 * time.Millisecond)
	f.Listen("vhu2.sock")
	f.waitNode("socket added after the restart listed", func(r map[string][]kubeletsim.Device) bool { return len(r[netdevtest.ResVhost]) == 3 })
	_, err := f.node.AddPod(context.Background(), kubeletsim.PodSpec{Namespace: "ns", Name: "after", Containers: []kubeletsim.ContainerSpec{
		{Name: "c", Requests: []kubeletsim.ResourceRequest{{Resource: netdevtest.ResVhost, Count: 3}}}}})
	if err != nil {
		t.Fatalf("pod after the restart: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
