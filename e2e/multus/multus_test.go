package multus_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"sigs.k8s.io/yaml"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

const resourceName = "example.com/hostdev"

// TestMultusDelegatesToDevplumb runs Multus thin as the runtime would, for a pod whose
// networks annotation selects the NAD of deployments/nads/multus-delegation.yaml:
// Multus reads the pod's device from the kubelet's PodResources API, hands it to devplumb
// as deviceID with CNIDeviceInfoFile, devplumb moves the device into the pod with the
// host-device plugin, and Multus's network-status carries the device-info.
func TestMultusDelegatesToDevplumb(t *testing.T) {
	e := newEnv(t)
	dev := e.hostNetdev()
	info := &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypePCI, Version: nadv1.DeviceInfoVersion,
		Pci: &nadv1.PciDevice{PciAddress: "0000:65:00.2", PfPciAddress: "0000:65:00.0"}}
	e.writeDP(dev, info)

	nad := e.createNAD("default")
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "multus-pod", "node-a",
		map[string]string{nadv1.NetworkAttachmentAnnot: nad.Name})
	if err != nil {
		t.Fatal(err)
	}
	e.podResources.SetPod(&v1.PodResources{Namespace: "default", Name: pod.Name, Containers: []*v1.ContainerResources{{
		Name: "c", Devices: []*v1.ContainerDevices{{ResourceName: resourceName, DeviceIds: []string{dev}}},
	}}})
	netns := testenv.NetNS(t)
	args := podArgs(pod.Namespace, pod.Name, string(pod.UID))

	out := e.multus("ADD", netns.Path(), args)
	var result struct {
		Interfaces []struct{ Name, Sandbox string } `json:"interfaces"`
	}
	if err := json.Unmarshal(out, &result); err != nil {
		t.Fatalf("Multus ADD result %s: %v", out, err)
	}

	// Multus's network-status: the cluster network, then devplumb's attachment with the
	// device-info devplumb left in CNIDeviceInfoFile.
	status := e2etest.NetworkStatus(t, srv.Client, "default", pod.Name)
	if len(status) != 2 || status[0].Name != "cluster-default" || !status[0].Default {
		t.Fatalf("network-status %+v: want cluster-default first, then default/%s", status, nad.Name)
	}
	att := status[1]
	if att.Name != "default/"+nad.Name || att.Interface != "net1" {
		t.Fatalf("attachment entry %+v, want default/%s on net1", att, nad.Name)
	}
	if !reflect.DeepEqual(att.DeviceInfo, info) {
		t.Fatalf("device-info in Multus's network-status = %+v, want the device plugin's %+v", att.DeviceInfo, info)
	}
	if len(att.IPs) != 1 || att.IPs[0] != "198.51.100.10" {
		t.Errorf("attachment IPs %v, want the NAD's static 198.51.100.10", att.IPs)
	}

	// The device really is in the pod, as net1, with the address.
	err = netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("net1")
		if err != nil {
			return fmt.Errorf("net1 in the pod: %w", err)
		}
		// host-device keeps the host name of the device it moved as the link's alias.
		if l.Attrs().Alias != dev {
			return fmt.Errorf("net1 is %q, not the device %s", l.Attrs().Alias, dev)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(dev); err == nil {
		t.Fatalf("%s still in the host namespace after ADD", dev)
	}
	// Multus asked the kubelet (List); devplumb took Multus's deviceID after one Get that
	// checks the kubelet assigned it to the pod.
	if n := e.podResources.Calls("Get"); n != 1 {
		t.Errorf("devplumb asked the kubelet %d times to check the deviceID Multus passed, want once", n)
	}
	if n := e.podResources.Calls("List"); n == 0 {
		t.Errorf("Multus never asked the kubelet: the device did not come from PodResources")
	}
	cniFile := e.cniDeviceInfoFile(nad.Namespace, nad.Name, "net1")
	if _, err := os.Stat(cniFile); err != nil {
		t.Fatalf("CNI device-info file Multus named: %v", err)
	}

	e.multus("DEL", netns.Path(), args)
	if _, err := netlink.LinkByName(dev); err != nil {
		t.Fatalf("%s not back in the host namespace after DEL: %v", dev, err)
	}
	if _, err := os.Stat(cniFile); !os.IsNotExist(err) {
		t.Errorf("CNI device-info file left after DEL: %v", err)
	}
	// DEL again (the runtime retries) is fine.
	e.multus("DEL", netns.Path(), args)
}

func podArgs(namespace, name, uid string) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s",
		namespace, name, containerID, uid)
}

const containerID = "e2e0multus0sandbox"

// createNAD creates the NAD of deployments/nads/multus-delegation.yaml in namespace, with
// only the paths of this test's temp dirs added to its config.
func (e *env) createNAD(namespace string) *nadv1.NetworkAttachmentDefinition {
	t := e.t
	data, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "deployments", "nads", "multus-delegation.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var nad nadv1.NetworkAttachmentDefinition
	if err := yaml.UnmarshalStrict(data, &nad); err != nil {
		t.Fatalf("multus-delegation.yaml: %v", err)
	}
	var conf map[string]any
	if err := json.Unmarshal([]byte(nad.Spec.Config), &conf); err != nil {
		t.Fatalf("multus-delegation.yaml config: %v", err)
	}
	// The node's paths go to devplumb's node config, named in the runtime's
	// environment, which Multus thin passes on to its delegates.
	conf["stateDir"] = filepath.Join(e.dir, "devplumb-state")
	conf["podResourcesSocket"] = e.podResources.Socket
	conf, node := nodeconfigtest.SplitMap(conf)
	if e.nodeConfig, err = nodeconfigtest.WriteIn(e.dir, node); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(conf)
	if nad.Annotations["k8s.v1.cni.cncf.io/resourceName"] != resourceName {
		t.Fatalf("multus-delegation.yaml: resourceName annotation %q, test serves %s", nad.Annotations["k8s.v1.cni.cncf.io/resourceName"], resourceName)
	}
	out, err := srv.CreateNAD(e2etest.Ctx(t), namespace, nad.Name, string(b), nad.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// multus runs Multus thin with the runtime's environment and fails the test on error.
func (e *env) multus(cmd, netns, args string) []byte {
	t := e.t
	t.Helper()
	// Bounded, so a hanging Multus or delegate fails this test instead of stalling CI.
	c := exec.CommandContext(e2etest.Ctx(t), "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mountScript,
		"sh", filepath.Dir(e.podResources.Socket), e.npwgDir, e.multusBin)
	c.WaitDelay = 5 * time.Second
	c.Stdin = bytes.NewReader(e.multusConf)
	c.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+containerID, "CNI_NETNS="+netns,
		"CNI_IFNAME=eth0", "CNI_PATH="+e.binDir, "CNI_ARGS="+args)
	if e.nodeConfig != "" {
		c.Env = append(c.Env, nodeconfigtest.Env(e.nodeConfig))
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		log, _ := os.ReadFile(e.multusLog)
		t.Fatalf("multus %s: %v\nstdout: %s\nstderr: %s\nmultus log (tail):\n%s", cmd, err, stdout.String(), stderr.String(), tail(string(log), 40))
	}
	return stdout.Bytes()
}

// mountScript gives Multus (and the plugins it runs) this test's kubelet PodResources
// socket and device-info directory at the paths Multus hard-codes, in a private mount
// namespace: the host's paths are never written.
const mountScript = `set -e
mount --bind "$1" /var/lib/kubelet/pod-resources
mount --bind "$2" /var/run/k8s.cni.cncf.io
exec "$3"`

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
