package dpmode

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// The VFs leave sysfs (sriov_numvfs 4 -> 0): the free ones leave ListAndWatch with
// their device-info files and CDI spec entries; the one a pod holds stays listed,
// unhealthy, with its file and spec entry until its pod is gone, then goes too. VFs
// that come back are listed again, healthy, with their files.
func TestGoneVFsGoUnlessHeld(t *testing.T) {
	f := newFixture(t)
	f.run()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	alloc, err := f.node.AddPod(ctx, kubeletsim.PodSpec{Namespace: "ns", Name: "holder", Containers: []kubeletsim.ContainerSpec{
		{Name: "c", Requests: []kubeletsim.ResourceRequest{{Resource: netdevtest.ResVF, Count: 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	held := alloc.Containers[0].Resources[0].DeviceIDs[0]
	var vfs []string
	for i := range 4 {
		vf := fmt.Sprintf("0000:01:01.%d", i)
		vfs = append(vfs, vf)
		sysfstest.RemovePCI(t, f.Sysfs, vf)
	}
	f.waitNode("only the held VF listed, unhealthy", func(r map[string][]kubeletsim.Device) bool {
		return slices.Equal(ids(r[netdevtest.ResVF]), []string{held}) && health(r[netdevtest.ResVF], held) == pluginapi.Unhealthy
	})
	f.wantVFFiles(vfs, held)

	if err := f.node.DelPod("ns", "holder"); err != nil {
		t.Fatal(err)
	}
	f.waitNode("no VF listed once the pod is gone", func(r map[string][]kubeletsim.Device) bool {
		return len(r[netdevtest.ResVF]) == 0 && f.node.Registered(netdevtest.ResVF)
	})
	f.wantVFFiles(vfs)

	for i, vf := range vfs {
		sysfstest.AddPCI(t, f.Sysfs, sysfstest.E810VF(vf, sysfstest.NodePF, i%2))
	}
	f.waitNode("the VFs back, healthy", func(r map[string][]kubeletsim.Device) bool {
		return slices.Equal(ids(r[netdevtest.ResVF]), vfs) && kubeletsim.CountHealthy(r[netdevtest.ResVF]) == 4
	})
	f.wantVFFiles(vfs, vfs...)
}

// wantVFFiles checks that of the VFs, exactly those in want have a device-info file
// and a CDI spec entry.
func (f *fixture) wantVFFiles(vfs []string, want ...string) {
	f.t.Helper()
	store := devinfo.NewStore(f.DevInfoDir)
	cache := cdiCache(f.t, f.CDIDir)
	for _, vf := range vfs {
		_, err := store.ReadDP(netdevtest.ResVF, vf)
		if kept := slices.Contains(want, vf); (err == nil) != kept {
			f.t.Errorf("device-info of VF %s: %v, want it there: %v", vf, err, kept)
		}
		name := netdevtest.ResVF + "=" + cdispec.DeviceName(vf)
		if kept := slices.Contains(want, vf); (cache.GetDevice(name) != nil) != kept {
			f.t.Errorf("CDI device %s in the spec: %v, want %v", name, !kept, kept)
		}
	}
}

// cdiCache reads the CDI specs in dir as a runtime does.
func cdiCache(t *testing.T, dir string) *cdi.Cache {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	return cache
}
