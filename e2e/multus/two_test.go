package multus_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestMultusTwoAttachmentsOfOneNetwork: a pod asks for the same network twice and has two
// devices of its resource. Multus hands the first device to the first attachment and the
// second to the second; devplumb must attach exactly the device Multus chose each time.
// Multus v4.3.0 sorts the pod's device IDs before it hands them out (its PR 1481, reverted
// in v4.3.1 for breaking multi-container pods), so its first is the smallest ID, not the
// kubelet's first: the kubelet's order here is the reverse of the sorted one, so the test
// sees whose order devplumb followed.
func TestMultusTwoAttachmentsOfOneNetwork(t *testing.T) {
	e := newEnv(t)
	const namespace = "two-devices"
	if err := srv.CreateNamespace(e2etest.Ctx(t), namespace); err != nil {
		t.Fatal(err)
	}
	chosen := []string{e.hostNetdev(), e.hostNetdev()} // Multus's order
	slices.Sort(chosen)
	devs := []string{chosen[1], chosen[0]} // the kubelet's
	infos := make([]*nadv1.DeviceInfo, len(chosen))
	for i, d := range chosen {
		infos[i] = &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypePCI, Version: nadv1.DeviceInfoVersion,
			Pci: &nadv1.PciDevice{PciAddress: fmt.Sprintf("0000:65:00.%d", i+2)}}
		e.writeDP(d, infos[i])
	}
	nad := e.createNAD(namespace)
	pod, err := srv.CreatePod(e2etest.Ctx(t), namespace, "two", "node-a",
		map[string]string{nadv1.NetworkAttachmentAnnot: nad.Name + "," + nad.Name})
	if err != nil {
		t.Fatal(err)
	}
	e.podResources.SetPod(&v1.PodResources{Namespace: namespace, Name: pod.Name, Containers: []*v1.ContainerResources{{
		Name: "c", Devices: []*v1.ContainerDevices{{ResourceName: resourceName, DeviceIds: devs}},
	}}})
	netns := testenv.NetNS(t)
	args := podArgs(namespace, pod.Name, string(pod.UID))

	e.multus("ADD", netns.Path(), args)
	status := e2etest.NetworkStatus(t, srv.Client, namespace, pod.Name)
	if len(status) != 3 {
		t.Fatalf("network-status %+v: want cluster-default and two attachments", status)
	}
	for i, ifName := range []string{"net1", "net2"} {
		got := status[i+1]
		if got.Name != namespace+"/"+nad.Name || got.Interface != ifName || !reflect.DeepEqual(got.DeviceInfo, infos[i]) {
			t.Errorf("entry %d = %+v (device-info %+v), want %s with %+v", i+1, got, got.DeviceInfo, ifName, infos[i])
		}
	}
	err = netns.Do(func(ns.NetNS) error {
		for i, ifName := range []string{"net1", "net2"} {
			l, err := netlink.LinkByName(ifName)
			if err != nil {
				return fmt.Errorf("%s in the pod: %w", ifName, err)
			}
			if l.Attrs().Alias != chosen[i] {
				return fmt.Errorf("%s is %q, Multus chose %s", ifName, l.Attrs().Alias, chosen[i])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	e.multus("DEL", netns.Path(), args)
	for _, d := range devs {
		if _, err := netlink.LinkByName(d); err != nil {
			t.Errorf("%s not back on the host after DEL: %v", d, err)
		}
	}
}
