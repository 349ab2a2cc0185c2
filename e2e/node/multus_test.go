package node_test

import (
	"context"
	"encoding/json"
	"path"
	"slices"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestMultusTwoAttachmentsOfOneResource (scenario 2): Multus is the node's CNI (the bridge
// as the cluster default network), thick as its own DaemonSet deploys it and thin; a pod
// with two attachments of deployments/nads/multus-delegation.yaml and two
// example.com/hostdev devices gets both devices, each attachment a different one, and
// they are the devices PodResources lists: the pod's net1 and net2 are those two host
// devices.
func TestMultusTwoAttachmentsOfOneResource(t *testing.T) {
	for _, mode := range []multusMode{multusThick, multusThin} {
		t.Run(string(mode), func(t *testing.T) { twoAttachmentsOfOneResource(t, mode) })
	}
}

func twoAttachmentsOfOneResource(t *testing.T, mode multusMode) {
	deployed(t)
	multusAsNodeCNI(t, mode)

	pod := createPodScript(t, "two", map[string]string{"example.com/hostdev": "2"},
		map[string]string{nadv1.NetworkAttachmentAnnot: "netdev-net@net1, netdev-net@net2"}, linksScript)
	waitRunning(t, pod)
	devs := podDevices(t, pod, "example.com/hostdev")
	if len(devs) != 2 || devs[0] == devs[1] {
		t.Fatalf("PodResources lists %v for the pod, want two devices", devs)
	}
	for _, d := range devs {
		if _, err := netlink.LinkByName(d); err == nil {
			t.Errorf("%s, one of the pod's devices, is still in the host's namespace", d)
		}
	}
	// Which attachment gets which of the two is Multus's choice; together they are both.
	v := podView(t, pod)
	got := []string{v.aliases["net1"], v.aliases["net2"]}
	if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(devs))) {
		t.Errorf("the pod's net1 and net2 are host devices %q, PodResources lists %v (the pod's interfaces: %v)", got, devs, v.aliases)
	}
	for _, ifName := range []string{"net1", "net2"} {
		networkStatus(t, pod, "default/netdev-net", ifName)
	}
	deletePod(t, pod)
	for _, d := range devs {
		waitFor(t, d+" back on the host", func(context.Context) error {
			_, err := netlink.LinkByName(d)
			return err
		})
	}
	if left := testenv.Files(t, nd.HostPath("/run/k8s.cni.cncf.io/devinfo/cni")); len(left) > 0 {
		t.Errorf("CNI device-info files left: %v", left)
	}
}

// vhostMaster is the host link the vhost-user test's macvlan hangs off.
const vhostMaster = "dpvhumv"

// TestMultusVhostUserDeviceInfo (scenario 2): under Multus thick, a pod requesting one of
// netdev-dp's example.com/vhostuser sockets (deployments/nads/vhost-user.yaml: the
// resourceName annotation, devplumb with the deviceID and CNIDeviceInfoFile
// capabilities) has the socket mounted where its device-info says, and the pod's
// network-status entry carries that vhost-user device-info.
//
// The shipped NAD's delegate is the userspace CNI plugin (OVS-DPDK), which the project
// does not ship and this machine cannot run: the test uses the shipped NAD with its
// delegate replaced by macvlan, as make demo's vhost network does. The device-info flows
// through netdev-dp, Multus and devplumb alone; the delegate only makes an interface.
func TestMultusVhostUserDeviceInfo(t *testing.T) {
	deployed(t)
	multusAsNodeCNI(t, multusThick)
	vhostMasterUp(t)
	nad := vhostUserNAD(t)

	pod := createPodScript(t, "vhost", map[string]string{"example.com/vhostuser": "1"},
		map[string]string{nadv1.NetworkAttachmentAnnot: nad + "@net1"}, linksScript)
	waitRunning(t, pod)
	devs := podDevices(t, pod, "example.com/vhostuser")
	if len(devs) != 1 {
		t.Fatalf("PodResources lists %v for the pod, want one socket", devs)
	}
	// netdev-dp's socketDir, as the shipped ConfigMap names it: the same path on the
	// node and in the pod.
	sock := path.Join("/var/run/vswitch/vhu", devs[0])
	entry := networkStatus(t, pod, "default/"+nad, "net1")
	di := entry.DeviceInfo
	if di == nil || di.Type != devinfo.TypeVhostUser || di.VhostUser == nil ||
		di.VhostUser.Path != sock || di.VhostUser.Mode != devinfo.VhostUserModeClient {
		raw, _ := json.Marshal(entry)
		t.Errorf("network-status entry %s: want vhost-user device-info, mode client, path %s", raw, sock)
	}
	if v := podView(t, pod); !slices.Equal(v.sockets, []string{sock}) {
		t.Errorf("the pod sees sockets %v, want its device %s", v.sockets, sock)
	}
	deletePod(t, pod)
	if left := testenv.Files(t, nd.HostPath("/run/k8s.cni.cncf.io/devinfo/cni")); len(left) > 0 {
		t.Errorf("CNI device-info files left: %v", left)
	}
}

// vhostUserNAD creates, from the applied deployments/nads/vhost-user.yaml, a NAD whose
// delegate is macvlan on vhostMaster (see TestMultusVhostUserDeviceInfo), and returns its name.
func vhostUserNAD(t *testing.T) string {
	t.Helper()
	return nadVariant(t, "vhostuser-net", "vhostuser-macvlan", func(conf map[string]any, _ map[string]string) {
		conf["delegate"] = map[string]any{"type": "macvlan", "master": vhostMaster, "mode": "bridge",
			"ipam": map[string]any{"type": "static", "addresses": []any{map[string]any{"address": "203.0.113.20/24"}}}}
	})
}

// nadVariant creates the NAD name in default, until the test ends: the applied NAD
// shipped with its annotations, and its config named name and changed by change.
func nadVariant(t *testing.T, shipped, name string, change func(conf map[string]any, annotations map[string]string)) string {
	t.Helper()
	c := ctx(t)
	nc, err := nd.API.NADClient()
	e2etest.Must(t, err)
	nad, err := nc.K8sCniCncfIoV1().NetworkAttachmentDefinitions("default").Get(c, shipped, metav1.GetOptions{})
	e2etest.Must(t, err)
	var conf map[string]any
	e2etest.Must(t, json.Unmarshal([]byte(nad.Spec.Config), &conf))
	conf["name"] = name
	change(conf, nad.Annotations)
	data, err := json.Marshal(conf)
	e2etest.Must(t, err)
	_, err = nd.API.CreateNAD(c, "default", name, string(data), nad.Annotations)
	e2etest.Must(t, err)
	t.Cleanup(func() {
		e2etest.Must(t, nc.K8sCniCncfIoV1().NetworkAttachmentDefinitions("default").Delete(context.Background(), name, metav1.DeleteOptions{}))
	})
	return name
}

// vhostMasterUp makes vhostMaster, up, until the package ends.
func vhostMasterUp(t *testing.T) {
	t.Helper()
	hostNetdevs(t, vhostMaster)
	master, err := netlink.LinkByName(vhostMaster)
	e2etest.Must(t, err)
	e2etest.Must(t, netlink.LinkSetUp(master))
}
