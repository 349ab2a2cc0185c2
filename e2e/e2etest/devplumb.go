package e2etest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
)

// CNICall is one run of the devplumb binary: the CNI_* environment and the
// network config on stdin.
type CNICall struct {
	Command     string // CNI_COMMAND: ADD, DEL, CHECK
	ContainerID string
	NetNS       string // path
	IfName      string
	Args        string // CNI_ARGS
	// Conf is the network config: the node config's keys in it
	// (nodeconfig.Keys: a test's directories, kubelet socket, kubeconfig)
	// go to a node config of the call's own, named to devplumb in
	// $DEVPLUMB_NODE_CONFIG, as a node's administrator would set them (a
	// network config may not), unless NodeConfig or Verbatim.
	Conf map[string]any
	// NodeConfig, when set, is the node config devplumb is run with (one an
	// agent the test runs reads too); the node config's keys in Conf are
	// dropped (the file holds them: nodeconfigtest.Split).
	NodeConfig string
	// Verbatim passes Conf as it is, node config keys and all: a test of
	// their refusal.
	Verbatim bool
}

// CNIResult is devplumb's stdout: a result, or a CNI error (Code != 0).
type CNIResult struct {
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details"`
	Interfaces []struct {
		Name    string `json:"name"`
		Mac     string `json:"mac"`
		Sandbox string `json:"sandbox"`
	} `json:"interfaces"`
	// Stderr is what devplumb logged: a best-effort step's failure is there only.
	Stderr string `json:"-"`
}

// RunDevplumb runs bin/devplumb as a container runtime would, with bin as its
// CNI_PATH. It fails the test when stdout is not JSON, or when the exit status
// and stdout disagree on success.
func RunDevplumb(t testing.TB, bin string, call CNICall) CNIResult {
	t.Helper()
	conf, node := call.Conf, call.NodeConfig
	if !call.Verbatim {
		var keys map[string]any
		conf, keys = nodeconfigtest.SplitMap(call.Conf)
		if node == "" {
			node = nodeconfigtest.Write(t, keys)
		}
	}
	stdin, err := json.Marshal(conf)
	Must(t, err)
	// Bounded, so a hanging plugin fails this test instead of stalling CI until -timeout.
	c := exec.CommandContext(Ctx(t), filepath.Join(bin, "devplumb"))
	c.WaitDelay = 5 * time.Second
	c.Stdin = bytes.NewReader(stdin)
	c.Env = append(os.Environ(), "CNI_COMMAND="+call.Command, "CNI_CONTAINERID="+call.ContainerID,
		"CNI_NETNS="+call.NetNS, "CNI_IFNAME="+call.IfName, "CNI_PATH="+bin, "CNI_ARGS="+call.Args)
	if node != "" {
		c.Env = append(c.Env, nodeconfigtest.Env(node))
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	runErr := c.Run()
	var res CNIResult
	if stdout.Len() > 0 {
		if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
			t.Fatalf("devplumb %s stdout %q: %v", call.Command, stdout.String(), err)
		}
	}
	if (runErr != nil) != (res.Code != 0) {
		t.Fatalf("devplumb %s: exit %v but stdout %s; stderr %s", call.Command, runErr, stdout.String(), stderr.String())
	}
	res.Stderr = stderr.String()
	return res
}

// HostDeviceConf is a devplumb network config whose delegate is host-device with
// the static address 192.0.2.10/24, its device-info and state under dir; extra
// keys override. Its node keys (the socket, directories and kubeconfig) are
// for a node config: RunDevplumb moves them there, nodeconfigtest.Split too.
func HostDeviceConf(network, podResourcesSocket, dir, kubeconfig string, extra map[string]any) map[string]any {
	c := map[string]any{
		"cniVersion": "1.0.0", "name": network, "type": "devplumb",
		"podResourcesSocket": podResourcesSocket, "deviceInfoDir": filepath.Join(dir, "devinfo"),
		"stateDir": filepath.Join(dir, "state"), "kubeconfig": kubeconfig,
		"injectDeviceID": []string{"device"},
		"delegate": map[string]any{"type": "host-device",
			"ipam": map[string]any{"type": "static", "addresses": []any{map[string]any{"address": "192.0.2.10/24"}}}},
	}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// NetworkStatus is the pod's network-status list; nil when the pod has no
// network-status annotation.
func NetworkStatus(t testing.TB, client kubernetes.Interface, namespace, pod string) []nadv1.NetworkStatus {
	t.Helper()
	p, err := client.CoreV1().Pods(namespace).Get(Ctx(t), pod, metav1.GetOptions{})
	Must(t, err)
	raw, ok := p.Annotations[nadv1.NetworkStatusAnnot]
	if !ok {
		return nil
	}
	var list []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(raw), &list); err != nil {
		t.Fatalf("pod %s/%s: network-status is not a list: %v\n%s", namespace, pod, err, raw)
	}
	return list
}
