package dpmode

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/testenv"
)

func pciInfo(addr string) *devinfo.DeviceInfo {
	return &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version, Pci: &devinfo.PciDevice{PciAddress: addr}}
}

// TestAdoptsFilesOfAKilledRun: a plugin killed with SIGKILL leaves its
// device-info files. The next run removes those of devices that are gone,
// keeps (and refreshes) those of devices that still exist, and does not
// touch files that are not its own even when their names look alike.
func TestAdoptsFilesOfAKilledRun(t *testing.T) {
	f := newFixture(t)
	store := devinfo.NewStore(f.DevInfoDir)
	write := func(res, id string, info *devinfo.DeviceInfo) {
		t.Helper()
		if err := store.WriteDP(res, id, info); err != nil {
			t.Fatal(err)
		}
	}
	write(netdevtest.ResVF, "0000:01:01.7", pciInfo("0000:01:01.7")) // VF gone since
	write(netdevtest.ResVF, "0000:01:01.0", pciInfo("0000:01:01.0")) // still there, stale content
	write(netdevtest.ResVhost, "gone.sock", &devinfo.DeviceInfo{Type: devinfo.TypeVhostUser, Version: devinfo.Version,
		VhostUser: &devinfo.VhostDevice{Mode: "client", Path: filepath.Join(f.SockDir, "gone.sock")}})
	// Another plugin's resources: "example.com/vf-extra" shares the prefix
	// "example.com-vf-"; "other.com/vf" shares nothing.
	write("example.com/vf-extra", "0000:01:01.7", pciInfo("0000:01:01.7"))
	write("other.com/vf", "0000:01:01.7", pciInfo("0000:01:01.7"))

	stop := f.run()
	for _, gone := range [][2]string{{netdevtest.ResVF, "0000:01:01.7"}, {netdevtest.ResVhost, "gone.sock"}} {
		if _, err := store.ReadDP(gone[0], gone[1]); err == nil {
			t.Errorf("file of vanished device %s %s kept", gone[0], gone[1])
		}
	}
	info, err := store.ReadDP(netdevtest.ResVF, "0000:01:01.0")
	if err != nil || info.Pci.PfPciAddress != "0000:01:00.0" {
		t.Errorf("file of an existing VF: %+v %v; want it kept and refreshed", info, err)
	}
	for _, res := range []string{"example.com/vf-extra", "other.com/vf"} {
		if _, err := store.ReadDP(res, "0000:01:01.7"); err != nil {
			t.Errorf("another plugin's file removed: %s: %v", res, err)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The adopted file of the existing VF is ours now: removed on stop.
	if _, err := store.ReadDP(netdevtest.ResVF, "0000:01:01.0"); err == nil {
		t.Error("adopted file left after stop")
	}
	for _, res := range []string{"example.com/vf-extra", "other.com/vf"} {
		if _, err := store.ReadDP(res, "0000:01:01.7"); err != nil {
			t.Errorf("another plugin's file removed on stop: %s: %v", res, err)
		}
	}
}

// TestListedDeviceKeepsFileWithoutInfo: a device that is still listed but
// can no longer be described (a netdev moved into a pod: its sysfs entry is
// in the pod's namespace) keeps its file while the plugin runs.
func TestListedDeviceKeepsFileWithoutInfo(t *testing.T) {
	r := &resource{name: netdevtest.ResVF, store: devinfo.NewStore(t.TempDir()), log: slog.Default(),
		files: map[string]*devinfo.DeviceInfo{}}
	dev := source.Device{Device: deviceplugin.Device{ID: "0000:01:01.0", Healthy: true}, Info: pciInfo("0000:01:01.0")}
	if errs := r.syncFiles(source.Index([]source.Device{dev})); len(errs) != 0 {
		t.Fatal(errs)
	}
	dev.Info = nil
	if errs := r.syncFiles(source.Index([]source.Device{dev})); len(errs) != 0 {
		t.Fatal(errs)
	}
	info, err := r.store.ReadDP(netdevtest.ResVF, dev.ID)
	if err != nil || !reflect.DeepEqual(info, pciInfo(dev.ID)) {
		t.Fatalf("file of a listed device: %+v %v", info, err)
	}
	if errs := r.syncFiles(nil); len(errs) != 0 {
		t.Fatal(errs)
	}
	if _, err := r.store.ReadDP(netdevtest.ResVF, dev.ID); err == nil {
		t.Fatal("file of a device that left is still there")
	}
}

func TestOwner(t *testing.T) {
	vf := &resource{name: "example.com/vf"}
	vfx := &resource{name: "example.com/vf-x"}
	rs := []*resource{vf, vfx}
	for name, want := range map[string]struct {
		r  *resource
		id string
	}{
		"example.com-vf-0000:01:01.0-device.json": {vf, "0000:01:01.0"},
		"example.com-vf-x-eth0-device.json":       {vfx, "eth0"},
		"example.com-vf--device.json":             {nil, ""},
		"example.com-vf-eth0.json":                {nil, ""},
		"other.com-vf-eth0-device.json":           {nil, ""},
	} {
		if r, id := owner(rs, name); r != want.r || id != want.id {
			t.Errorf("owner(%s) = %v %q, want %v %q", name, r, id, want.r, want.id)
		}
	}
}

// TestSecondInstanceLeavesTheFirstAlone: a second netdev-dp with the same
// resources fails at start without removing the running one's files.
func TestSecondInstanceLeavesTheFirstAlone(t *testing.T) {
	f := newFixture(t)
	f.run()
	err := Run(t.Context(), f.Config, nil, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "another plugin is serving") {
		t.Fatalf("second instance: %v", err)
	}
	if _, err := devinfo.NewStore(f.DevInfoDir).ReadDP(netdevtest.ResVF, "0000:01:01.0"); err != nil {
		t.Errorf("the running instance's device-info file is gone: %v", err)
	}
	if left := testenv.Files(t, f.CDIDir); len(left) != 4 {
		t.Errorf("CDI specs of the running instance: %v", left)
	}
}

// TestRemovedFileIsWrittenAgain: a listed device's file removed by someone
// else comes back at the next sync.
func TestRemovedFileIsWrittenAgain(t *testing.T) {
	r := &resource{name: netdevtest.ResVF, store: devinfo.NewStore(t.TempDir()), log: slog.Default(),
		files: map[string]*devinfo.DeviceInfo{}}
	devs := source.Index([]source.Device{{Device: deviceplugin.Device{ID: "0000:01:01.0", Healthy: true}, Info: pciInfo("0000:01:01.0")}})
	if errs := r.syncFiles(devs); len(errs) != 0 {
		t.Fatal(errs)
	}
	if err := r.store.RemoveDP(netdevtest.ResVF, "0000:01:01.0"); err != nil {
		t.Fatal(err)
	}
	if errs := r.syncFiles(devs); len(errs) != 0 {
		t.Fatal(errs)
	}
	if _, err := r.store.ReadDP(netdevtest.ResVF, "0000:01:01.0"); err != nil {
		t.Fatalf("removed file not written again: %v", err)
	}
}

// TestOverlappingResourcesRefused: one device selected by two resources
// would be counted twice by the kubelet; the start fails naming both, and
// leaves nothing behind.
func TestOverlappingResourcesRefused(t *testing.T) {
	f := newFixture(t)
	f.Config.Resources = append(f.Config.Resources,
		resources.Resource{ResourceName: "example.com/vf-again", PCI: &pci.Selectors{Drivers: []string{"iavf"}}},
		resources.Resource{ResourceName: "example.com/veth-again", NetDevs: &link.Config{Names: []string{f.VethPrefix + "a"}}})
	err := Run(t.Context(), f.Config, nil, slog.Default())
	for _, want := range []string{
		"example.com/vf and example.com/vf-again both select PCI device 0000:01:01.0",
		"example.com/veth and example.com/veth-again both select netdevs device " + f.VethPrefix + "a",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error containing %q", err, want)
		}
	}
	assertCleanedUp(t, f)
}

// TestOwnsDPDirectoryMode: the NAD client library (Multus, the SR-IOV device plugin)
// creates devinfo/dp with mode 000, which netdev-dp's DaemonSet (no CAP_DAC_OVERRIDE)
// could not list. netdev-dp gives it 0755 before it adopts files there, and keeps them.
func TestOwnsDPDirectoryMode(t *testing.T) {
	f := newFixture(t)
	dp := filepath.Join(f.DevInfoDir, "dp")
	if err := os.MkdirAll(f.DevInfoDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dp, 0); err != nil {
		t.Fatal(err)
	}
	f.run()
	st, err := os.Stat(dp)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Fatalf("dp/ has mode %04o after netdev-dp started, want 0755", st.Mode().Perm())
	}
	if len(testenv.Files(t, dp)) == 0 {
		t.Fatal("netdev-dp wrote no device-info file into dp/")
	}
}

// TestAdoptLeavesCNIDirAlone: devinfo/cni is the CNI plugins' directory. Multus (the NAD
// client library) creates it with mode 000, which netdev-dp's DaemonSet, without
// CAP_DAC_OVERRIDE, cannot list, and netdev-dp restarted next to it crash-looped. As root
// here, a cni/ that is not a directory stands for one it cannot list: netdev-dp still
// adopts its dp/ files and starts.
func TestAdoptLeavesCNIDirAlone(t *testing.T) {
	f := newFixture(t)
	store := devinfo.NewStore(f.DevInfoDir)
	if err := store.WriteDP(netdevtest.ResVF, "0000:01:01.0", pciInfo("0000:01:01.0")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.DevInfoDir, devinfo.KindCNI), nil, 0); err != nil {
		t.Fatal(err)
	}
	resources, err := build(f.Config, nil, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if err := adopt(resources, store); err != nil {
		t.Fatalf("adopt with an unlistable cni/: %v", err)
	}
	for _, r := range resources {
		if _, ok := r.files["0000:01:01.0"]; r.name == netdevtest.ResVF && !ok {
			t.Errorf("%s did not adopt its file of 0000:01:01.0: %v", netdevtest.ResVF, r.files)
		}
	}
	f.run() // and the whole start
}
