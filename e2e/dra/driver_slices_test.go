package dra_test

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/netdev/dramode"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

func strAttr(d resourceapi.Device, name string) string {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// TestDriverPublishesSlices: netdev-dp --mode dra, as the DRA DaemonSet's service account
// under the shipped RBAC, registers as a DRA plugin and publishes one pool named after the
// node, owned by the Node, with each device's attributes; a device that goes (a socket
// closed, a VF leaving sysfs) is tainted (or leaves the slice), and one that comes joins it.
func TestDriverPublishesSlices(t *testing.T) {
	n := newDriverNode(t)
	n.start()

	info, err := n.registrationInfo()
	e2etest.Must(t, err)
	if info.Type != registerapi.DRAPlugin || info.Name != drvDriver || !slices.Contains(info.SupportedVersions, "v1.DRAPlugin") {
		t.Errorf("registration info %+v", info)
	}
	reg := registerapi.NewRegistrationClient(drvDial(t, n.registrar+"/"+drvDriver+"-reg.sock"))
	_, err = reg.NotifyRegistrationStatus(e2etest.Ctx(t), &registerapi.RegistrationStatus{PluginRegistered: true})
	e2etest.Must(t, err)

	vf1, sock0 := dramode.DeviceName(drvResVF, "0000:01:01.1"), dramode.DeviceName(drvResVhost, "vhu0.sock")
	devs := n.waitDevices("six devices", func(m map[string]resourceapi.Device) bool { return len(m) == 6 })
	dom := drvDriver + "/"
	want := map[string]string{
		"k8s.cni.cncf.io/deviceID": "0000:01:01.1", "k8s.cni.cncf.io/resourceName": drvResVF,
		dom + "type": "pci", dom + "pciAddress": "0000:01:01.1", dom + "pfName": "ens1f0", dom + "interfaceName": "ens1f0v1",
	}
	for k, v := range want {
		if got := strAttr(devs[vf1], k); got != v {
			t.Errorf("VF attribute %s = %q, want %q (device %+v)", k, got, v, devs[vf1])
		}
	}
	if a := devs[vf1].Attributes[resourceapi.QualifiedName(dom+"numaNode")]; a.IntValue == nil || *a.IntValue != 0 {
		t.Errorf("VF numaNode %+v", a)
	}
	if got := strAttr(devs[sock0], dom+"socketPath"); got != n.sockDir+"/vhu0.sock" {
		t.Errorf("socket path %q", got)
	}
	if got := strAttr(devs[sock0], "k8s.cni.cncf.io/deviceID"); got != "vhu0.sock" {
		t.Errorf("socket deviceID %q", got)
	}
	items, err := n.slices(e2etest.Ctx(t))
	e2etest.Must(t, err)
	for _, s := range items {
		if s.Spec.Pool.Name != n.name || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "Node" || s.OwnerReferences[0].Name != n.name {
			t.Errorf("slice %s: pool %q owners %+v", s.Name, s.Spec.Pool.Name, s.OwnerReferences)
		}
	}

	// Devices come and go: a PCI function that leaves the host, held by no prepared
	// claim, leaves the slice; a socket that goes stays, tainted, where the API server
	// keeps taints (1.36+), and leaves the slice where it drops them.
	gone := func(m map[string]resourceapi.Device, name string) bool {
		d, in := m[name]
		if deviceTaints(t) {
			return in && len(d.Taints) == 1
		}
		return !in
	}
	l := n.listen("vhu2.sock")
	sysfstest.RemovePCI(t, n.sysfs, "0000:01:01.3")
	sock2, vf3 := dramode.DeviceName(drvResVhost, "vhu2.sock"), dramode.DeviceName(drvResVF, "0000:01:01.3")
	n.waitDevices("new socket in, removed VF gone", func(m map[string]resourceapi.Device) bool {
		_, in := m[sock2]
		_, vfIn := m[vf3]
		return in && !vfIn
	})
	l.Close()
	n.waitDevices("closed socket gone", func(m map[string]resourceapi.Device) bool { return gone(m, sock2) })
}
