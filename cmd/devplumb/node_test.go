package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// node is a host for the entry point: the binaries built as installed
// (devplumb and devplumb-direct beside each other, with the CNI plugins), a
// PodResources server giving pod default/p1 one device, a pod netns, and an
// agent socket path nothing listens on unless a test starts an agent.
type node struct {
	t          *testing.T
	bin        string
	root       string
	socket     string
	nodeConfig string
	pod        ns.NetNS
	bridge     string
	conf       map[string]any
}

const podArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=uid-p1"

func newNode(t *testing.T) *node {
	t.Helper()
	testenv.CNIPlugins(t)
	n := &node{t: t, bin: testenv.Build(t, "./cmd/devplumb"), root: t.TempDir(), pod: testenv.NetNS(t),
		bridge: testenv.UniqueName("dpent")}
	n.socket = filepath.Join(n.root, "agent", "agent.sock")
	pr := podresourcestest.NewServer(t)
	// The node's settings: the entry point checks the agent's answers
	// against them, and the agent and devplumb-direct use them.
	node := map[string]any{"stateDir": n.stateDir(), "podResourcesSocket": pr.Socket,
		"deviceInfoDir": filepath.Join(n.root, "devinfo")}
	var err error
	if n.nodeConfig, err = nodeconfigtest.WriteIn(n.root, node); err != nil {
		t.Fatal(err)
	}
	t.Setenv(nodeconfig.Env, n.nodeConfig)
	pr.SetPod(&v1.PodResources{Namespace: "default", Name: "p1", Containers: []*v1.ContainerResources{{
		Name: "app", Devices: []*v1.ContainerDevices{{ResourceName: "example.com/netdev", DeviceIds: []string{"dev-a"}}},
	}}})
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(n.bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	n.conf = map[string]any{"cniVersion": "1.0.0", "name": "br-net", "type": "devplumb",
		"resourceName": "example.com/netdev", "delegate": n.bridgeConf("192.0.2.10/24")}
	return n
}

// bridgeConf is a bridge delegate with a static address.
func (n *node) bridgeConf(addr string) map[string]any {
	return map[string]any{"type": "bridge", "bridge": n.bridge,
		"ipam": map[string]any{"type": "static", "addresses": []any{map[string]string{"address": addr}}}}
}

func (n *node) stateDir() string { return filepath.Join(n.root, "state") }

// stdin is the node's devplumb config.
func (n *node) stdin() []byte {
	b, err := json.Marshal(n.conf)
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// outcome is what the runtime sees of one call.
type outcome struct {
	stdout, stderr string
	code           int
}

// run executes binary (devplumb or devplumb-direct) as a runtime does.
func (n *node) run(binary, cmd, ifName string, stdin []byte) outcome {
	n.t.Helper()
	c := exec.Command(filepath.Join(n.bin, binary))
	c.Env = append(runtimeEnviron(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID=c1", "CNI_NETNS="+n.pod.Path(),
		"CNI_IFNAME="+ifName, "CNI_PATH="+n.bin, "CNI_ARGS="+podArgs, socketEnv+"="+n.socket)
	c.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	err := c.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		n.t.Fatalf("run %s %s: %v", binary, cmd, err)
	}
	return outcome{stdout: out.String(), stderr: errOut.String(), code: c.ProcessState.ExitCode()}
}

// runtimeEnviron is this process's environment as a runtime's or the
// agent's: without the depth pkg/cni/plugin's prepare in a test agent marks
// this test process with.
func runtimeEnviron() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, depthEnv+"=") })
}

// mustRun is run that fails the test unless the call succeeded.
func (n *node) mustRun(binary, cmd, ifName string, stdin []byte) string {
	n.t.Helper()
	o := n.run(binary, cmd, ifName, stdin)
	if o.code != 0 {
		n.t.Fatalf("%s %s %s: exit %d\nstdout %s\nstderr %s", binary, cmd, ifName, o.code, o.stdout, o.stderr)
	}
	return o.stdout
}

// records are devplumb's attachment records on the node.
func (n *node) records() []*attachment.Record {
	n.t.Helper()
	all, err := attachment.New(n.stateDir()).List()
	if err != nil {
		n.t.Fatal(err)
	}
	return all
}

// hasLink reports whether the pod's netns holds ifName.
func (n *node) hasLink(ifName string) bool {
	n.t.Helper()
	found := false
	if err := n.pod.Do(func(ns.NetNS) error {
		_, err := netlink.LinkByName(ifName)
		found = err == nil
		return nil
	}); err != nil {
		n.t.Fatal(err)
	}
	return found
}

var randomRE = regexp.MustCompile(`"mac":\s*"[0-9a-f:]+"|"veth[0-9a-f]+"`)

// sameResult strips what differs between two ADDs of one attachment (the
// veths' random MACs and host-side names).
func sameResult(a, b string) bool {
	return randomRE.ReplaceAllString(a, `""`) == randomRE.ReplaceAllString(b, `""`)
}

// cacheDir is the libcni cache of the node's network: what the agent must
// answer.
func (n *node) cacheDir() string { return filepath.Join(n.stateDir(), "libcni", "br-net") }
