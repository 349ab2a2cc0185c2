package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// Names the bench gives what it creates on the host, so a killed run is recognisable.
const (
	Resource   = "bench.example.com/dev"
	podNS      = "bench"
	bridgeName = "dpbench0"
)

// env is one node for a part of the run: a temp dir with the binaries, the network
// configs, devplumb's state and device-info dirs, a PodResources server, and the
// network namespaces it made. close removes all of it.
type env struct {
	cfg    Config
	dir    string
	shm    string // on tmpfs, as /var/run is on a node: the device-info files
	bin    string // CNI_PATH: devplumb, the CNI plugins, multus
	netDir string // NETCONFPATH for cnitool
	pods   *podSet
	pr     *podresourcesserver.Server
	mu     sync.Mutex
	netns  []ns.NetNS
	thick  *thickDaemon // P1's multus-daemon, when it runs
	// statusd is P1's status daemon, when its pass-through row runs.
	statusd *statusDaemon
	// stopIdleAgent stops P1's idle agent (idleagent.go), when its row runs.
	stopIdleAgent func()
	agents        []*agentProc // the node agents it started
	// nodeConfigs is each written network's node config (writeNet).
	nodeConfigs map[string]string
}

func newEnv(cfg Config, prCfg podresourcesserver.Config) (*env, error) {
	dir, err := os.MkdirTemp("", "devplumb-bench-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	e := &env{cfg: cfg, dir: dir, bin: filepath.Join(dir, "bin"), netDir: filepath.Join(dir, "net.d")}
	e.shm, err = os.MkdirTemp("/dev/shm", "devplumb-bench-")
	if err != nil {
		e.close()
		return nil, fmt.Errorf("temp dir on tmpfs: %w", err)
	}
	e.pods = newPodSet(devinfo.NewStore(filepath.Join(e.shm, "devinfo")))
	if err := e.setup(prCfg); err != nil {
		e.close()
		return nil, err
	}
	live.Lock()
	live.envs[e] = true
	live.Unlock()
	return e, nil
}

// live are the envs not yet closed, for Abort.
var live = struct {
	sync.Mutex
	envs map[*env]bool
	kube *kubeNode
}{envs: map[*env]bool{}}

// Abort closes every env still open and stops the API server: on a signal, the bench
// removes what it made before it exits.
func Abort() {
	live.Lock()
	envs, k := live.envs, live.kube
	live.envs, live.kube = map[*env]bool{}, nil
	live.Unlock()
	for e := range envs {
		e.close()
	}
	if k != nil {
		k.close()
	}
}

func setLiveKube(k *kubeNode) {
	live.Lock()
	live.kube = k
	live.Unlock()
}

func (e *env) setup(prCfg podresourcesserver.Config) error {
	for _, d := range []string{e.bin, e.netDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	links := map[string]string{"devplumb": e.cfg.Devplumb, "bridge": e.cfg.plugin("bridge"),
		"host-local": e.cfg.plugin("host-local"), "cnitool": e.cfg.plugin("cnitool")}
	if e.cfg.Multus != "" {
		links["multus"] = e.cfg.Multus
	}
	if e.cfg.Passthrough != "" {
		links["passthrough"] = e.cfg.Passthrough
	}
	if e.cfg.MultusThick != "" {
		links["multus-shim"] = filepath.Join(e.cfg.MultusThick, "multus-shim")
	}
	for name, target := range links {
		abs, err := filepath.Abs(target)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("binary %s: %w", name, err)
		}
		if err := os.Symlink(abs, filepath.Join(e.bin, name)); err != nil {
			return err
		}
	}
	pr, err := podresourcesserver.Start(filepath.Join(e.dir, "kubelet.sock"), e.pods, prCfg)
	if err != nil {
		return err
	}
	e.pr = pr
	return nil
}

// newEnvWithPods is newEnv with the node's pods set (pods.set): pods pods of devices
// devices each.
func newEnvWithPods(cfg Config, prCfg podresourcesserver.Config, pods, devices int) (*env, error) {
	e, err := newEnv(cfg, prCfg)
	if err != nil {
		return nil, err
	}
	if err := e.pods.set(pods, devices); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// close stops the server and removes the netns, the bridge and the temp dirs.
func (e *env) close() {
	live.Lock()
	delete(live.envs, e)
	live.Unlock()
	if e.pr != nil {
		e.pr.Stop()
	}
	e.mu.Lock()
	stopIdle := e.stopIdleAgent
	e.stopIdleAgent = nil
	e.mu.Unlock()
	if stopIdle != nil { // unlocked: it waits for the idle agent's process to end
		stopIdle()
	}
	e.mu.Lock()
	e.thick.stop() // before the netns and dirs it uses go
	e.thick = nil
	if e.statusd != nil {
		e.statusd.close()
		e.statusd = nil
	}
	for _, a := range e.agents {
		a.stop()
	}
	e.agents = nil
	for _, n := range e.netns {
		forgetResults(n.Path())
		_ = n.Close()
		_ = testutils.UnmountNS(n)
	}
	e.netns = nil
	e.mu.Unlock()
	if l, err := netlink.LinkByName(bridgeName); err == nil {
		_ = netlink.LinkDel(l)
	}
	_ = os.RemoveAll(e.dir)
	if e.shm != "" {
		_ = os.RemoveAll(e.shm)
	}
}

// forgetResults removes the entries cnitool cached for its calls into netns: a step that
// failed between an ADD and its DEL leaves the ADD's entry, which nothing else removes.
func forgetResults(netns string) {
	left, _ := filepath.Glob(filepath.Join(testenv.CnitoolResults, "*-"+testenv.CnitoolID(netns)+"-*"))
	for _, f := range left {
		_ = os.Remove(f)
	}
}

// newNetns makes a network namespace that close removes.
func (e *env) newNetns() (string, error) {
	n, err := testutils.NewNS()
	if err != nil {
		return "", fmt.Errorf("create netns: %w", err)
	}
	e.mu.Lock()
	e.netns = append(e.netns, n)
	e.mu.Unlock()
	return n.Path(), nil
}

// bridge is the delegate every variant runs: bridge with host-local IPAM, its leases
// in the temp dir.
func (e *env) bridge(subnet string) map[string]any {
	return map[string]any{"type": "bridge", "bridge": bridgeName,
		"ipam": map[string]any{"type": "host-local", "subnet": subnet, "dataDir": filepath.Join(e.dir, "ipam")}}
}

// devplumbConf is a devplumb network delegating to bridge; stateDir may be elsewhere
// (tmpfs) to measure what the state's fsyncs cost.
func (e *env) devplumbConf(name, subnet, stateDir string) map[string]any {
	return map[string]any{"cniVersion": "1.0.0", "name": name, "type": "devplumb", "resourceName": Resource,
		"podResourcesSocket": e.pr.Socket(), "deviceInfoDir": e.pods.files.Dir,
		"stateDir": stateDir, "delegate": e.bridge(subnet)}
}

// writeNet writes a network config for cnitool under its name; its node keys (the
// PodResources socket, directories, kubeconfig) go to a node config (splitNode) that
// cnitoolCmd names to devplumb.
func (e *env) writeNet(conf map[string]any) error {
	net, node, err := e.splitNode(conf)
	if err != nil {
		return err
	}
	b, err := json.Marshal(net)
	if err != nil {
		return err
	}
	e.mu.Lock()
	if e.nodeConfigs == nil {
		e.nodeConfigs = map[string]string{}
	}
	e.nodeConfigs[net["name"].(string)] = node
	e.mu.Unlock()
	return os.WriteFile(filepath.Join(e.netDir, net["name"].(string)+".conf"), b, 0o644)
}

// splitNode returns conf without the node config's keys (nodeconfig.Keys: a network
// config may not set them) and the path of a node config holding them, as a node's
// administrator writes it: one file per content under e.dir/node, so the networks of
// one node config (and the agent serving them) name the same file.
func (e *env) splitNode(conf map[string]any) (map[string]any, string, error) {
	net, node := maps.Clone(conf), map[string]any{}
	for _, k := range nodeconfig.Keys {
		if v, ok := net[k]; ok {
			delete(net, k)
			if v != "" && v != nil && v != false {
				node[k] = v
			}
		}
	}
	data, err := json.Marshal(node) // keys sorted
	if err != nil {
		return nil, "", err
	}
	if _, err := nodeconfig.Parse(data); err != nil {
		return nil, "", fmt.Errorf("node config %s: %w", data, err)
	}
	sum := sha256.Sum256(data)
	dir := filepath.Join(e.dir, "node", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, "node.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, "", err
	}
	return net, path, nil
}

// directStdin is the stdin of a direct devplumb call of conf and the environment entry
// naming its node config (splitNode).
func (e *env) directStdin(conf map[string]any) (stdin []byte, nodeEnv string, err error) {
	net, node, err := e.splitNode(conf)
	if err != nil {
		return nil, "", err
	}
	stdin, err = json.Marshal(net)
	return stdin, nodeconfig.Env + "=" + node, err
}

// nodeConfigOf is the node config of conf's node keys (splitNode): an agent serving
// conf's network reads it.
func (e *env) nodeConfigOf(conf map[string]any) (string, error) {
	_, node, err := e.splitNode(conf)
	return node, err
}

// cniArgs is the pod identity a runtime passes: the UID of the pod in the API server,
// when the bench made one.
func (e *env) cniArgs(pod string) string {
	uid, ok := e.cfg.kube.podUID(pod)
	if !ok {
		uid = "uid-" + pod
	}
	return "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + podNS + ";K8S_POD_NAME=" + pod + ";K8S_POD_UID=" + uid
}

// withKube adds the API server's kubeconfig to a devplumb config and creates pod in the
// API server: devplumb then writes its network-status entry there.
func (e *env) withKube(conf map[string]any, pod string) (map[string]any, error) {
	if _, err := e.cfg.kube.pod(pod); err != nil {
		return nil, err
	}
	conf["kubeconfig"] = e.cfg.kube.srv.Kubeconfig
	return conf, nil
}

// cnitool runs `cnitool cmd net netns` as a runtime would and returns its wall time.
func (e *env) cnitool(cmd, net, netns, ifName, pod string, extraEnv ...string) (time.Duration, error) {
	return e.cnitoolArgs(cmd, net, netns, ifName, e.cniArgs(pod), extraEnv...)
}

// noAgent is the entry point's environment entry for a call without an agent: a socket
// path in the env's dir that does not exist, so the entry point execs devplumb-direct at
// once, whatever runs at /run/devplumb/agent.sock on this machine.
func (e *env) noAgent() string { return agentSocketEnv + "=" + filepath.Join(e.dir, "no-agent.sock") }

// cnitoolArgs is cnitool with the CNI_ARGS given; extraEnv (e.g. an agent's socket) comes last
// and wins.
func (e *env) cnitoolArgs(cmd, net, netns, ifName, cniArgs string, extraEnv ...string) (time.Duration, error) {
	c := e.cnitoolCmd(cmd, net, netns, ifName, cniArgs, extraEnv)
	d, _, err := timedOutput(c, cmd, net)
	return d, err
}

// timedOutput runs cnitool c and returns its wall time and its output (the plugins'
// stderr included).
func timedOutput(c *exec.Cmd, cmd, net string) (time.Duration, []byte, error) {
	start := time.Now()
	out, err := c.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		return d, out, fmt.Errorf("cnitool %s %s: %w: %s", cmd, net, err, out)
	}
	return d, out, nil
}

// cnitoolOutput is cnitool with extraEnv, returning also what it printed.
func (e *env) cnitoolOutput(cmd, net, netns, ifName, pod string, extraEnv ...string) (time.Duration, []byte, error) {
	return timedOutput(e.cnitoolCmd(cmd, net, netns, ifName, e.cniArgs(pod), extraEnv), cmd, net)
}

// cnitoolCmd is `cnitool cmd net netns` with a runtime's environment, extraEnv last.
func (e *env) cnitoolCmd(cmd, net, netns, ifName, cniArgs string, extraEnv []string) *exec.Cmd {
	c := exec.Command(filepath.Join(e.bin, "cnitool"), cmd, net, netns)
	c.Env = append(os.Environ(), "CNI_PATH="+e.bin, "NETCONFPATH="+e.netDir, "CNI_IFNAME="+ifName, "CNI_ARGS="+cniArgs, e.noAgent())
	e.mu.Lock()
	node := e.nodeConfigs[net]
	e.mu.Unlock()
	if node != "" {
		c.Env = append(c.Env, nodeconfig.Env+"="+node)
	}
	c.Env = append(c.Env, extraEnv...)
	return c
}

// podSet is the PodResources server's pods: pod-i holds devices dev-i-0.. of Resource,
// each with a device plugin device-info file (a PCI device, as for an SR-IOV VF).
type podSet struct {
	files  *devinfo.Store
	served atomic.Int64 // calls the PodResources server answered (past its rate limiter)
	mu     sync.Mutex
	pods   []*v1.PodResources
	byKey  map[string]*v1.PodResources // as the kubelet, Get does not scan the list
}

func newPodSet(files *devinfo.Store) *podSet { return &podSet{files: files} }

// set gives the node n pods of devs devices each (replacing what was there).
func (s *podSet) set(n, devs int) error {
	pods := make([]*v1.PodResources, n)
	for i := range pods {
		ids := make([]string, devs)
		for d := range ids {
			ids[d] = fmt.Sprintf("dev-%d-%d", i, d)
			if err := s.files.WriteDP(Resource, ids[d], pciInfo(i*devs+d)); err != nil {
				return fmt.Errorf("device-info of %s: %w", ids[d], err)
			}
		}
		pods[i] = &v1.PodResources{Namespace: podNS, Name: podName(i), Containers: []*v1.ContainerResources{{
			Name: "main", Devices: []*v1.ContainerDevices{{ResourceName: Resource, DeviceIds: ids}}}}}
	}
	byKey := make(map[string]*v1.PodResources, n)
	for _, p := range pods {
		byKey[p.Namespace+"/"+p.Name] = p
	}
	s.mu.Lock()
	s.pods, s.byKey = pods, byKey
	s.mu.Unlock()
	return nil
}

// pciInfo is the device-info of the k-th PCI device of the node.
func pciInfo(k int) *devinfo.DeviceInfo {
	pci := fmt.Sprintf("0000:%02x:%02x.%d", k/256%256, k/8%32, k%8)
	return &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version, Pci: &devinfo.PciDevice{PciAddress: pci}}
}

// put adds pod p, or replaces the pod of its name.
func (s *podSet) put(p *v1.PodResources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	if s.byKey == nil {
		s.byKey = map[string]*v1.PodResources{}
	}
	pods := make([]*v1.PodResources, 0, len(s.pods)+1) // a new list: ListPods' callers keep the old one
	for _, q := range s.pods {
		if q.Namespace+"/"+q.Name != key {
			pods = append(pods, q)
		}
	}
	s.pods, s.byKey[key] = append(pods, p), p
}

func podName(i int) string { return fmt.Sprintf("pod-%d", i) }

// ListPods implements podresourcesserver.Source. The pods are never modified once set.
func (s *podSet) ListPods() []*v1.PodResources {
	s.served.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pods
}

// GetPod implements podresourcesserver.Source.
func (s *podSet) GetPod(namespace, name string) (*v1.PodResources, bool) {
	s.served.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.byKey[namespace+"/"+name]
	return p, ok
}

// Allocatable implements podresourcesserver.Source.
func (s *podSet) Allocatable() *v1.AllocatableResourcesResponse {
	s.served.Add(1)
	return &v1.AllocatableResourcesResponse{}
}
