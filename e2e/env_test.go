// Package e2e drives the devplumb binary end to end: cnitool (or a direct
// exec, for malformed input cnitool would refuse) runs devplumb, which runs
// real delegates built from containernetworking/plugins in real network
// namespaces, with devices handed out by a real PodResources gRPC server.
package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

const resource = "example.com/netdev"

type env struct {
	t                                        *testing.T
	bin, root                                string
	devinfoDir, stateDir, recordDir, confDir string
	pr                                       *podresourcestest.Server
	// extraPath, when set, is searched for plugins before bin.
	extraPath string
	// exe, when set, is the devplumb binary run; extraEnv is added to its
	// environment.
	exe      string
	extraEnv []string
	// verbatim, when set, runs devplumb with its stdin as given: the node
	// config's keys in it are not moved to a node config (a test of their
	// refusal in a network config).
	verbatim bool
	// nodeConfigs is the node config of each installed network (cnitool).
	nodeConfigs map[string]string
}

// cniPath is the CNI_PATH devplumb runs with.
func (e *env) cniPath() string {
	if e.extraPath != "" {
		return e.extraPath + ":" + e.bin
	}
	return e.bin
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testenv.CNIPlugins(t)
	bin := testenv.Build(t, "./cmd/devplumb", "./e2e/recorder")
	root := t.TempDir()
	e := &env{t: t, bin: bin, root: root,
		devinfoDir: filepath.Join(root, "devinfo"), stateDir: filepath.Join(root, "state"),
		recordDir: filepath.Join(root, "record"), confDir: filepath.Join(root, "net.d"),
		pr: podresourcestest.NewServer(t)}
	if err := os.MkdirAll(e.confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

// conf is a devplumb config of this env with the given delegate.
func (e *env) conf(name string, delegate map[string]any) map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0", "name": name, "type": "devplumb",
		"resourceName": resource, "podResourcesSocket": e.pr.Socket,
		"deviceInfoDir": e.devinfoDir, "stateDir": e.stateDir,
		"delegate": delegate,
	}
}

func (e *env) recorder(extra map[string]any) map[string]any {
	d := map[string]any{"type": "recorder", "recordDir": e.recordDir}
	for k, v := range extra {
		d[k] = v
	}
	return d
}

// nodeDir holds the node configs of the env's calls: the node's settings a
// test writes beside its network config (e.conf's directories, a kubeconfig)
// go to a node config, one per distinct content, as a node's administrator
// would write it (a network config may not set them).
func (e *env) nodeDir() string { return filepath.Join(e.root, "node") }

// split moves the node config's keys out of conf into a node config file of
// the env (the same file for the same keys and values) and returns conf
// without them and that file's path.
func (e *env) split(conf map[string]any) (map[string]any, string) {
	e.t.Helper()
	net, node := nodeconfigtest.SplitMap(conf)
	data, err := json.Marshal(node) // keys sorted: one file per content
	if err != nil {
		e.t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	dir := filepath.Join(e.nodeDir(), fmt.Sprintf("%x", sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	path, err := nodeconfigtest.WriteIn(dir, node)
	if err != nil {
		e.t.Fatal(err)
	}
	return net, path
}

// nodeConfig is the node config file of conf's node keys (as run and
// install name it to devplumb): an agent started for the env reads it.
func (e *env) nodeConfig(conf map[string]any) string {
	_, path := e.split(conf)
	return path
}

// splitStdin is split of a network config in JSON; stdin that is not a JSON
// object is returned as it is, with no node config.
func (e *env) splitStdin(stdin []byte) ([]byte, string) {
	e.t.Helper()
	dec := json.NewDecoder(bytes.NewReader(stdin))
	dec.UseNumber()
	var conf map[string]any
	if err := dec.Decode(&conf); err != nil || dec.More() || conf == nil {
		return stdin, ""
	}
	net, path := e.split(conf)
	data, err := json.Marshal(net)
	if err != nil {
		e.t.Fatal(err)
	}
	return data, path
}

// install writes conf as a one-plugin conflist cnitool finds by name, its
// node keys in a node config that cnitool names to devplumb.
func (e *env) install(conf map[string]any) {
	e.t.Helper()
	conf, node := e.split(conf)
	if e.nodeConfigs == nil {
		e.nodeConfigs = map[string]string{}
	}
	e.nodeConfigs[conf["name"].(string)] = node
	list := map[string]any{"cniVersion": conf["cniVersion"], "name": conf["name"], "plugins": []any{conf}}
	data, err := json.Marshal(list)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.confDir, conf["name"].(string)+".conflist"), data, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// cnitool runs `cnitool cmd network netns`; it returns stdout and stderr.
func (e *env) cnitool(cmd, network, netns, ifName, cniArgs, capArgs string) (string, string, error) {
	if cmd == "add" {
		e.cachedResult(network, testenv.CnitoolID(netns), ifName)
	}
	c := exec.Command(filepath.Join(e.bin, "cnitool"), cmd, network, netns)
	c.Env = append(os.Environ(), "CNI_PATH="+e.bin, "NETCONFPATH="+e.confDir, "CNI_IFNAME="+ifName,
		"CNI_ARGS="+cniArgs, "CAP_ARGS="+capArgs)
	if node := e.nodeConfigs[network]; node != "" {
		c.Env = append(c.Env, nodeconfigtest.Env(node))
	}
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	err := c.Run()
	return out.String(), errOut.String(), err
}

// cachedResult removes, at the end of the test, the result libcni caches for an ADD (a
// DEL removes it; a test that ends without DEL would leave it on the host).
func (e *env) cachedResult(network, containerID, ifName string) {
	f := filepath.Join(testenv.CnitoolResults, network+"-"+containerID+"-"+ifName)
	if _, err := os.Lstat(f); err == nil {
		return // not this test's
	}
	e.t.Cleanup(func() { _ = os.Remove(f) })
}

func (e *env) mustCnitool(cmd, network, netns, ifName, cniArgs, capArgs string) string {
	e.t.Helper()
	out, errOut, err := e.cnitool(cmd, network, netns, ifName, cniArgs, capArgs)
	if err != nil {
		e.t.Fatalf("cnitool %s %s: %v\nstdout: %s\nstderr: %s", cmd, network, err, out, errOut)
	}
	return out
}

// cniErr is a CNI error as devplumb prints it.
type cniErr struct {
	CNIVersion string `json:"cniVersion"`
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details"`
}

// runBound is how long one devplumb run may take before the test calls it
// hung: far beyond any real run, so it only turns a hang into a failure.
const runBound = 2 * time.Minute

// run executes devplumb directly, as a runtime would.
func (e *env) run(cmd string, stdin []byte, containerID, netns, ifName, args string) ([]byte, *cniErr) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runBound)
	defer cancel()
	c, out, errOut := e.command(ctx, cmd, stdin, containerID, netns, ifName, args)
	if err := c.Run(); err != nil {
		if ctx.Err() != nil {
			e.t.Fatalf("devplumb %s did not finish within %s (killed)\nstderr: %s", cmd, runBound, errOut.String())
		}
		ce := &cniErr{}
		if jerr := json.Unmarshal(out.Bytes(), ce); jerr != nil || ce.Code == 0 {
			e.t.Fatalf("devplumb %s failed without a CNI error JSON: %v\nstdout: %s\nstderr: %s", cmd, err, out.String(), errOut.String())
		}
		return out.Bytes(), ce
	}
	return out.Bytes(), nil
}

// command is the devplumb run of a CNI command, with its output buffers.
// e.exe, when set, is the devplumb binary (one built with failpoints), and
// e.extraEnv is added to its environment. Unless e.verbatim, the node
// config's keys in stdin go to a node config named in the environment.
func (e *env) command(ctx context.Context, cmd string, stdin []byte, containerID, netns, ifName, args string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	node := ""
	if !e.verbatim {
		stdin, node = e.splitStdin(stdin)
	}
	exe := e.exe
	if exe == "" {
		exe = filepath.Join(e.bin, "devplumb")
	}
	c := exec.CommandContext(ctx, exe)
	c.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+containerID, "CNI_NETNS="+netns,
		"CNI_IFNAME="+ifName, "CNI_ARGS="+args, "CNI_PATH="+e.cniPath())
	if node != "" {
		c.Env = append(c.Env, nodeconfigtest.Env(node))
	}
	c.Env = append(c.Env, e.extraEnv...)
	c.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	return c, &out, &errOut
}

func podArgs(namespace, name string) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=uid-%s;K8S_POD_INFRA_CONTAINER_ID=infra",
		namespace, name, name)
}

// setPod gives a pod devices of the resource, as the kubelet would record them.
func (e *env) setPod(namespace, name string, devs ...string) {
	e.pr.SetPod(&v1.PodResources{Namespace: namespace, Name: name, Containers: []*v1.ContainerResources{{
		Name: "app", Devices: []*v1.ContainerDevices{{ResourceName: resource, DeviceIds: devs}},
	}}})
}

// pciPod gives pod default/name the PCI device addr, with its DP file.
func (e *env) pciPod(name, addr string) {
	e.setPod("default", name, addr)
	e.writeDP(addr, pciInfo(addr))
}

// hostDevicePod gives pod default/p1 a veth end as its device, with a DP file
// saying pci, and installs fast-net delegating to host-device. It returns the
// device, the pod's netns, the config and the pod's CNI_ARGS.
func (e *env) hostDevicePod(pci string) (string, ns.NetNS, map[string]any, string) {
	dev := testenv.VethPair(e.t, "dpv") + "a"
	pod := testenv.NetNS(e.t)
	e.setPod("default", "p1", dev)
	e.writeDP(dev, pciInfo(pci))
	conf := e.conf("fast-net", map[string]any{"type": "host-device"})
	conf["injectDeviceID"] = []string{"device"}
	e.install(conf)
	return dev, pod, conf, podArgs("default", "p1")
}

// crashAfterClaim leaves state as an ADD of pod default/p1 in fast-net
// crashed right after claiming dev; it returns the container ID cnitool uses.
func (e *env) crashAfterClaim(pod ns.NetNS, dev string) string {
	e.t.Helper()
	cid := testenv.CnitoolID(pod.Path())
	crashed := attachment.Request{Key: attachment.Key{Network: "fast-net", ContainerID: cid, IfName: "net1"},
		Pod: attachment.Pod{Namespace: "default", Name: "p1"}, ResourceName: resource, Candidates: []string{dev}}
	if _, err := attachment.New(e.stateDir).Take(crashed); err != nil {
		e.t.Fatal(err)
	}
	return cid
}

// corruptRecord writes an unreadable state record (and a CNI file) for an
// attachment, as a disk error or a hand edit would leave; it returns the record.
func (e *env) corruptRecord(network, containerID, ifName string) string {
	e.t.Helper()
	rec := filepath.Join(e.stateDir, "attachments", network+":"+containerID+":"+ifName+".json")
	for f, data := range map[string]string{rec: `{"network":`, e.cniFile(network, containerID, ifName): "{}"} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
	return rec
}

// writeDP writes a device plugin device-info file for a device.
func (e *env) writeDP(dev string, info *devinfo.DeviceInfo) {
	e.t.Helper()
	if err := devinfo.NewStore(e.devinfoDir).WriteDP(resource, dev, info); err != nil {
		e.t.Fatal(err)
	}
}

func pciInfo(addr string) *devinfo.DeviceInfo {
	return &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version, Pci: &devinfo.PciDevice{PciAddress: addr}}
}

func (e *env) cniFile(network, containerID, ifName string) string {
	return filepath.Join(e.devinfoDir, "cni", devinfo.CNIFileName(network, containerID, ifName))
}

func (e *env) state() []*attachment.Record {
	e.t.Helper()
	all, err := attachment.New(e.stateDir).List()
	if err != nil {
		e.t.Fatal(err)
	}
	return all
}

// Record mirrors e2e/recorder's record.
type Record struct {
	Command        string            `json:"command"`
	Stdin          json.RawMessage   `json:"stdin"`
	Env            map[string]string `json:"env"`
	DeviceInfoFile *string           `json:"deviceInfoFile"`
}

func (e *env) record(cmd, containerID, ifName string) (*Record, map[string]any) {
	e.t.Helper()
	data, err := os.ReadFile(filepath.Join(e.recordDir, fmt.Sprintf("%s-%s_%s.json", cmd, containerID, ifName)))
	if err != nil {
		e.t.Fatalf("recorder got no %s: %v", cmd, err)
	}
	r := &Record{}
	stdin := map[string]any{}
	if err := json.Unmarshal(data, r); err != nil {
		e.t.Fatal(err)
	}
	if err := json.Unmarshal(r.Stdin, &stdin); err != nil {
		e.t.Fatal(err)
	}
	return r, stdin
}

// linkIn reports whether netns has a link named name.
func linkIn(t *testing.T, n ns.NetNS, name string) bool {
	t.Helper()
	found := false
	err := n.Do(func(ns.NetNS) error {
		_, err := netlink.LinkByName(name)
		found = err == nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func hostLink(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
