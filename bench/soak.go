package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// The soak's node: one resource of vhost-user sockets netdev-dp serves (a socket is a
// device whose device-info devplumb copies, so the CNI file's removal is checked too).
const (
	soakResource = "example.com/soak"
	soakNet      = "soak"
	soakNS       = "soak"
	soakSockets  = 2
)

// soak runs cfg.Soak ADD/DEL cycles, one pod at a time, on a node of the project's own
// daemons: nodesim as the kubelet, netdev-dp as the device plugin, devplumbctl metrics
// draining devplumb's spool. Each cycle admits a pod, makes its netns, ADDs and DELs
// devplumb -> bridge + host-local through cnitool, removes the netns and the pod. After the
// last cycle nothing may be left (records, device-info files, leases, netns, links,
// cnitool's cache), and the daemons' open files and memory must be what they were after the
// warm-up.
func soak(cfg Config, r *Report) error {
	if cfg.Soak <= 0 {
		return nil
	}
	n, err := startSoakNode(cfg)
	if err != nil {
		return err
	}
	defer n.close()
	warm := max(cfg.Soak/10, 1)
	var before, after soakSample
	var failAdd, failDel int
	for i := range cfg.Soak {
		add, del := n.cycle(i)
		failAdd, failDel = failAdd+add, failDel+del
		if i+1 == warm {
			before = n.sample()
		}
		if (i+1)%100 == 0 {
			cfg.logf("   %d cycles, %d failed ADDs, %d failed DELs", i+1, failAdd, failDel)
		}
	}
	after = n.sample()
	left, err := n.leftovers()
	if err != nil {
		return err
	}
	r.Tables = append(r.Tables, soakTables(cfg.Soak, warm, failAdd, failDel, left, before, after)...)
	return soakVerdict(failAdd, failDel, left, before, after)
}

// soakVerdict fails the bench when a cycle failed, something was left or a daemon holds
// more open files than after the warm-up: the table says what.
func soakVerdict(failAdd, failDel int, l soakLeft, before, after soakSample) error {
	if failAdd+failDel+l.records+l.cniFiles+l.leases+l.netns+l.links+l.cache > 0 {
		return fmt.Errorf("the soak failed calls or left something behind: %+v, %d failed ADDs, %d failed DELs", l, failAdd, failDel)
	}
	for i := range before.files {
		if after.files[i] > before.files[i] {
			return fmt.Errorf("daemon %d holds %d open files after the soak, %d after its warm-up", i, after.files[i], before.files[i])
		}
	}
	return nil
}

// soakNode is the soak's node: its root dir (nodesim's and the daemons'), the env that
// runs cnitool, the sockets standing in for a vswitch, and the daemons.
type soakNode struct {
	e       *env
	root    string
	ctl     *kubeletsim.ControlClient
	sockets []net.Listener
	daemons []*daemon
	netns   []string // every netns a cycle made: none may be left
}

func startSoakNode(cfg Config) (*soakNode, error) {
	e, err := newEnv(cfg, podresourcesserver.Config{})
	if err != nil {
		return nil, err
	}
	n := &soakNode{e: e, root: filepath.Join(e.dir, "node")}
	if err := n.start(); err != nil {
		n.close()
		return nil, err
	}
	return n, nil
}

// start makes the sockets and starts nodesim, netdev-dp and devplumbctl metrics, the
// order a node starts them in, and writes devplumb's network.
func (n *soakNode) start() error {
	vhost := filepath.Join(n.root, "vhost")
	if err := os.MkdirAll(vhost, 0o755); err != nil {
		return err
	}
	for i := range soakSockets {
		l, err := net.Listen("unix", filepath.Join(vhost, fmt.Sprintf("port%d.sock", i)))
		if err != nil {
			return fmt.Errorf("vhost-user socket: %w", err)
		}
		n.sockets = append(n.sockets, l)
	}
	if err := n.startDaemons(vhost); err != nil {
		return err
	}
	conf := map[string]any{"cniVersion": "1.0.0", "name": soakNet, "type": "devplumb", "resourceName": soakResource,
		"podResourcesSocket": filepath.Join(n.root, "pod-resources", "kubelet.sock"),
		"deviceInfoDir":      filepath.Join(n.root, "devinfo"), "stateDir": filepath.Join(n.root, "state"),
		"delegate": n.e.bridge("10.126.0.0/24")}
	return n.e.writeNet(conf)
}

func (n *soakNode) startDaemons(vhost string) error {
	bin := filepath.Dir(n.e.cfg.Devplumb)
	logs := filepath.Join(n.e.dir, "logs")
	ns, err := startDaemon(logs, filepath.Join(bin, "nodesim"), "serve", "--root", n.root)
	if err != nil {
		return err
	}
	n.daemons = append(n.daemons, ns)
	if n.ctl, err = waitControl(n.root); err != nil {
		return err
	}
	dpConf := filepath.Join(n.root, "netdev-dp.json")
	res := fmt.Sprintf(`{"resources":[{"resourceName":%q,"vhostUser":{"socketDir":%q,"mode":"client"}}]}`, soakResource, vhost)
	if err := os.WriteFile(dpConf, []byte(res), 0o644); err != nil {
		return err
	}
	dp, err := startDaemon(logs, filepath.Join(bin, "netdev-dp"), "--config", dpConf,
		"--plugin-dir", filepath.Join(n.root, "device-plugins"), "--devinfo-dir", filepath.Join(n.root, "devinfo"),
		"--cdi-dir", filepath.Join(n.root, "cdi"), "--pod-resources-socket", filepath.Join(n.root, "pod-resources", "kubelet.sock"))
	if err != nil {
		return err
	}
	n.daemons = append(n.daemons, dp)
	m, err := startDaemon(logs, filepath.Join(bin, "devplumbctl"), "metrics", "--listen", "127.0.0.1:0",
		"--state-dir", filepath.Join(n.root, "state"), "--drain-interval", "1s")
	if err != nil {
		return err
	}
	n.daemons = append(n.daemons, m)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.ctl.WaitRegistered(ctx, soakResource); err != nil {
		return fmt.Errorf("netdev-dp did not register %s with nodesim: %w", soakResource, err)
	}
	return nil
}

// waitControl waits until nodesim answers on its control socket: it makes it
// first and serves it once its other sockets are up.
func waitControl(root string) (*kubeletsim.ControlClient, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := kubeletsim.WaitControlClient(ctx, root)
	if err != nil {
		return nil, err
	}
	if _, err := c.Pods(ctx); err != nil {
		return nil, fmt.Errorf("nodesim does not answer: %w", err)
	}
	return c, nil
}

// close stops the daemons, last started first (netdev-dp asks nodesim at its stop), then
// the sockets and the env.
func (n *soakNode) close() {
	for i := len(n.daemons) - 1; i >= 0; i-- {
		n.daemons[i].stop()
	}
	for _, l := range n.sockets {
		_ = l.Close()
	}
	n.e.close()
}

// cycle is one pod's life; it returns 1 for a failed ADD and for a failed DEL.
func (n *soakNode) cycle(i int) (failAdd, failDel int) {
	pod := fmt.Sprintf("soak-%d", i)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := kubeletsim.PodSpec{Namespace: soakNS, Name: pod, UID: "uid-" + pod, Containers: []kubeletsim.ContainerSpec{
		{Name: "app", Requests: []kubeletsim.ResourceRequest{{Resource: soakResource, Count: 1}}}}}
	if _, err := n.ctl.AddPod(ctx, spec); err != nil {
		n.e.cfg.logf("   cycle %d: admit the pod: %v", i, err)
		return 1, 0
	}
	defer func() {
		if err := n.ctl.DelPod(ctx, soakNS, pod); err != nil {
			n.e.cfg.logf("   cycle %d: remove the pod: %v", i, err)
		}
	}()
	netns, err := testutils.NewNS()
	if err != nil {
		n.e.cfg.logf("   cycle %d: %v", i, err)
		return 1, 0
	}
	n.netns = append(n.netns, netns.Path())
	defer func() { _ = netns.Close(); _ = testutils.UnmountNS(netns) }()
	if _, err := n.e.soakCNI("add", netns.Path(), pod); err != nil {
		n.e.cfg.logf("   cycle %d: %v", i, err)
		failAdd = 1
	}
	if _, err := n.e.soakCNI("del", netns.Path(), pod); err != nil {
		n.e.cfg.logf("   cycle %d: %v", i, err)
		failDel = 1
	}
	return failAdd, failDel
}

// soakCNI is cnitool for the soak's pods, which live in their own namespace.
func (e *env) soakCNI(cmd, netns, pod string) (time.Duration, error) {
	return e.cnitoolArgs(cmd, soakNet, netns, "net1",
		"IgnoreUnknown=1;K8S_POD_NAMESPACE="+soakNS+";K8S_POD_NAME="+pod+";K8S_POD_UID=uid-"+pod)
}

// netnsLeft is how many of the cycles' network namespaces still exist.
func (n *soakNode) netnsLeft() int {
	left := 0
	for _, p := range n.netns {
		if _, err := os.Stat(p); err == nil {
			left++
		}
	}
	return left
}

// bridgePorts is the number of links enslaved to the bench's bridge: each pod's veth host
// end while its attachment lives. (Other links of the host are not the soak's to count.)
func bridgePorts() int {
	br, err := netlink.LinkByName(bridgeName)
	if err != nil {
		return 0
	}
	links, _ := netlink.LinkList()
	n := 0
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			n++
		}
	}
	return n
}

// readRSS is a process's resident memory in KiB, from /proc.
func readRSS(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	return -1
}
