//go:build vmguest

package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
)

// bin holds the project's binaries, the CNI plugins and cnitool (e2e/vm puts them there).
func bin(t *testing.T) string {
	d := os.Getenv("DEVPLUMB_VM_BIN")
	if d == "" {
		t.Fatal("DEVPLUMB_VM_BIN is not set: these tests run inside e2e/vm's guest")
	}
	return d
}

// pf is one igb PF of the guest.
type pf struct {
	addr, netdev string
	numa         int
}

// pfs are the guest's igb PFs, in PCI address order (one per NUMA node).
func pfs(t *testing.T) []pf {
	t.Helper()
	dirs, _ := filepath.Glob("/sys/bus/pci/drivers/igb/0000:*")
	var out []pf
	for _, d := range dirs {
		dev, err := sysfs.Read(sysfs.DefaultRoot, filepath.Base(d))
		e2etest.Must(t, err)
		if len(dev.NetDevs) != 1 {
			t.Fatalf("PF %s netdevs %v", dev.Address, dev.NetDevs)
		}
		out = append(out, pf{addr: dev.Address, netdev: dev.NetDevs[0], numa: dev.NUMANode})
	}
	if len(out) != 2 {
		t.Fatalf("igb PFs: %v", dirs)
	}
	return out
}

// setVFs makes n VFs on the PF (0 first: the kernel refuses to change a non-zero
// count) and returns their addresses in VF index order; the test's end removes them.
// The PF's link is brought up, as a VF is unhealthy while it is down.
func (p pf) setVFs(t *testing.T, n int) []string {
	t.Helper()
	write(t, p.sysfs("sriov_numvfs"), "0")
	write(t, p.sysfs("sriov_numvfs"), fmt.Sprint(n))
	t.Cleanup(func() { _ = os.WriteFile(p.sysfs("sriov_numvfs"), []byte("0"), 0) })
	link, err := netlink.LinkByName(p.netdev)
	e2etest.Must(t, err)
	e2etest.Must(t, netlink.LinkSetUp(link))
	vfs := p.vfs(t)
	if len(vfs) != n {
		t.Fatalf("PF %s: %d VFs after sriov_numvfs=%d: %v", p.addr, len(vfs), n, vfs)
	}
	eventually(t, 20*time.Second, "the VFs' netdevs and the PF's link up", func() bool {
		for _, vf := range vfs {
			if len(vfNetdevs(vf)) != 1 {
				return false
			}
		}
		return sysfs.OperState(sysfs.DefaultRoot, p.addr, p.netdev) == "up"
	})
	return vfs
}

func (p pf) sysfs(name string) string {
	return filepath.Join(sysfs.DevicesDir(sysfs.DefaultRoot), p.addr, name)
}

// vfs are the PF's VF addresses by index (virtfnN links).
func (p pf) vfs(t *testing.T) []string {
	var out []string
	for i := 0; ; i++ {
		target, err := os.Readlink(p.sysfs(fmt.Sprintf("virtfn%d", i)))
		if err != nil {
			return out
		}
		out = append(out, filepath.Base(target))
	}
}

// vfNetdevs are the netdevs the host netns sees on a PCI function.
func vfNetdevs(addr string) []string {
	d, err := sysfs.Read(sysfs.DefaultRoot, addr)
	if err != nil {
		return nil
	}
	return d.NetDevs
}

func write(t *testing.T, path, value string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		t.Fatalf("write %s to %s: %v", value, path, err)
	}
}

func eventually(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", bound, what)
		}
		time.Sleep(250 * time.Millisecond) // the guest is slow (TCG): polling costs it
	}
}

// node is nodesim (the kubelet) and netdev-dp (the device plugin, as shipped) under one
// root, as make demo runs them: ROOT/pod-resources, ROOT/devinfo, ROOT/devplumb (state).
type node struct {
	t       *testing.T
	bin     string
	root    string
	sim, dp *kubeapi.Proc
	ctl     *kubeletsim.ControlClient
}

// resource is one netdev-dp resource of the config.
type resource struct {
	ResourceName string         `json:"resourceName"`
	PCI          map[string]any `json:"pci"`
}

// startNode starts nodesim and netdev-dp with the resources and waits until each is
// registered. The test's end stops both (netdev-dp first: it asks nodesim at stop).
func startNode(t *testing.T, resources ...resource) *node {
	t.Helper()
	n := &node{t: t, bin: bin(t), root: t.TempDir()}
	n.startSim()
	n.startDP(resources, "--plugin-dir", filepath.Join(n.root, "device-plugins"), "--pod-resources-socket", n.podResources())
	for _, r := range resources {
		eventually(t, time.Minute, "netdev-dp registering "+r.ResourceName, func() bool {
			if done, err := n.dp.Exited(); done {
				t.Fatalf("netdev-dp exited: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			return n.ctl.WaitRegistered(ctx, r.ResourceName) == nil
		})
	}
	return n
}

// startSim starts nodesim serve with args besides its root, until the test ends, and
// connects to its control socket.
func (n *node) startSim(args ...string) {
	n.t.Helper()
	var err error
	n.sim, err = kubeapi.Spawn(n.root, "nodesim", filepath.Join(n.bin, "nodesim"), append([]string{"serve", "--root", n.root}, args...)...)
	e2etest.Must(n.t, err)
	n.t.Cleanup(func() { n.sim.Terminate(10 * time.Second) })
	eventually(n.t, 30*time.Second, "nodesim's kubelet.sock", func() bool {
		_, err := os.Stat(filepath.Join(n.root, "device-plugins", "kubelet.sock"))
		return err == nil
	})
	n.ctl, err = kubeletsim.NewControlClient(n.root)
	e2etest.Must(n.t, err)
}

// startDP starts netdev-dp with the resources and args besides its config and
// directories, until the test ends (stopped before nodesim: it asks nodesim at stop).
func (n *node) startDP(resources []resource, args ...string) {
	n.t.Helper()
	conf, err := json.Marshal(map[string]any{"resyncInterval": "2s", "resources": resources})
	e2etest.Must(n.t, err)
	cfg := filepath.Join(n.root, "netdev-dp.json")
	e2etest.Must(n.t, os.WriteFile(cfg, conf, 0o644))
	args = append([]string{"--config", cfg, "--devinfo-dir", n.devinfoDir(), "--cdi-dir", filepath.Join(n.root, "cdi")}, args...)
	n.dp, err = kubeapi.Spawn(n.root, "netdev-dp", filepath.Join(n.bin, "netdev-dp"), args...)
	e2etest.Must(n.t, err)
	n.t.Cleanup(func() { n.dp.Terminate(10 * time.Second) })
	n.t.Cleanup(n.logsOnFailure)
}

func (n *node) devinfoDir() string   { return filepath.Join(n.root, "devinfo") }
func (n *node) stateDir() string     { return filepath.Join(n.root, "devplumb") }
func (n *node) podResources() string { return filepath.Join(n.root, "pod-resources", "kubelet.sock") }

func (n *node) logsOnFailure() {
	if !n.t.Failed() {
		return
	}
	for _, name := range []string{"nodesim", "netdev-dp"} {
		log, _ := os.ReadFile(filepath.Join(n.root, name+".log"))
		n.t.Logf("--- %s.log:\n%s", name, log)
	}
}

// devices are the resource's devices as the kubelet (nodesim) has them, once cond
// holds for them.
func (n *node) devices(res string, cond func([]kubeletsim.Device) bool) []kubeletsim.Device {
	n.t.Helper()
	var devs []kubeletsim.Device
	eventually(n.t, 30*time.Second, "the devices of "+res, func() bool {
		all, err := n.ctl.Resources(e2etest.Ctx(n.t))
		e2etest.Must(n.t, err)
		devs = all[res]
		return cond(devs)
	})
	return devs
}

// ids are the devices' IDs, sorted.
func ids(devs []kubeletsim.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.ID)
	}
	slices.Sort(out)
	return out
}

// allHealthy holds when the resource has exactly want, all healthy.
func allHealthy(want []string) func([]kubeletsim.Device) bool {
	return func(devs []kubeletsim.Device) bool {
		for _, d := range devs {
			if !d.Healthy() {
				return false
			}
		}
		return slices.Equal(ids(devs), sorted(want))
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// addPod admits a pod whose one container asks for count devices of res.
func (n *node) addPod(name, res string, count int) (*kubeletsim.PodAllocation, error) {
	return n.ctl.AddPod(e2etest.Ctx(n.t), kubeletsim.PodSpec{Namespace: "default", Name: name, UID: "uid-" + name,
		Containers: []kubeletsim.ContainerSpec{{Name: "app", Requests: []kubeletsim.ResourceRequest{{Resource: res, Count: count}}}}})
}

func (n *node) delPod(name string) {
	n.t.Helper()
	e2etest.Must(n.t, n.ctl.DelPod(e2etest.Ctx(n.t), "default", name))
}

// podArgs are the CNI_ARGS a runtime gives for pod default/name.
func podArgs(name string) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=%s;K8S_POD_UID=uid-%s;K8S_POD_INFRA_CONTAINER_ID=infra-%s", name, name, name)
}

// network is a devplumb network of res delegating to host-device with a static
// address, its node keys this node's.
func (n *node) network(name, res, addr string) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0", "name": name, "type": "devplumb", "resourceName": res,
		"podResourcesSocket": n.podResources(), "deviceInfoDir": n.devinfoDir(), "stateDir": n.stateDir(),
		"delegate": map[string]any{"type": "host-device",
			"ipam": map[string]any{"type": "static", "addresses": []any{map[string]any{"address": addr}}}},
	}
}

// cni runs devplumb as the runtime would for pod name's sandbox in netns.
func (n *node) cni(command, pod, netns, ifName string, conf map[string]any) e2etest.CNIResult {
	n.t.Helper()
	return e2etest.RunDevplumb(n.t, n.bin, e2etest.CNICall{Command: command, ContainerID: "infra-" + pod,
		NetNS: netns, IfName: ifName, Args: podArgs(pod), Conf: conf})
}

// ctl runs devplumbctl against this node.
func (n *node) devplumbctl(args ...string) string {
	n.t.Helper()
	out, err := exec.CommandContext(e2etest.Ctx(n.t), filepath.Join(n.bin, "devplumbctl"), args...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("devplumbctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
