package node

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// kubeletConfig: the cgroupfs driver on this cgroup v1 (hybrid) machine, no iptables
// chains on the host, the runtime the node's containerd, ports that do not clash.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%[1]s
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
address: 127.0.0.1
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
makeIPTablesUtilChains: false
syncFrequency: 10s
`

// StartKubelet starts the kubelet (again, after StopKubelet) and waits until it is healthy.
func (n *Node) StartKubelet() error {
	if n.kubelet != nil {
		return fmt.Errorf("node: kubelet already running")
	}
	cf := filepath.Join(n.Dir, "kubelet.yaml")
	if _, err := os.Stat(cf); err != nil {
		var ports [2]int
		for i := range ports {
			if ports[i], err = kubeapi.FreePort(); err != nil {
				return err
			}
		}
		n.kubeletHealthz = ports[1]
		conf := fmt.Sprintf(kubeletConfig, n.ContainerdSocket, ports[0], ports[1])
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	p, err := kubeapi.Spawn(n.Dir, "kubelet", "nsenter", n.ns.command(nil, n.bin.kubelet,
		"--config="+cf, "--kubeconfig="+n.API.Kubeconfig, "--hostname-override="+Name, "--v=2")...)
	if err != nil {
		return err
	}
	n.kubelet = p
	url := "http://127.0.0.1:" + strconv.Itoa(n.kubeletHealthz) + "/healthz"
	return n.waitFor("kubelet", 2*time.Minute, func() error {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%w: kubelet exited: %v", errGiveUp, err)
		}
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		return nil
	})
}

// StopKubelet stops the kubelet (SIGTERM, as a service manager does); pods keep running.
func (n *Node) StopKubelet() {
	if n.kubelet != nil {
		n.kubelet.Terminate(30 * time.Second)
		n.kubelet = nil
	}
}

// waitNodeReady waits until the node is registered and Ready (its CNI config is in place).
func (n *Node) waitNodeReady(ctx context.Context) error {
	return n.waitFor("node Ready", 3*time.Minute, func() error {
		node, err := n.API.Client.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node %s not Ready", Name)
	})
}

// startControlPlane starts kube-scheduler and kube-controller-manager (DaemonSets,
// service accounts and their tokens, the root CA config map, garbage collection).
func (n *Node) startControlPlane() error {
	ports := make([]int, 2)
	for i := range ports {
		var err error
		if ports[i], err = kubeapi.FreePort(); err != nil {
			return err
		}
	}
	var err error
	// In the node's mount namespace too: kube-controller-manager makes the flex volume
	// directory (/usr/libexec/kubernetes/...) at start.
	n.scheduler, err = kubeapi.Spawn(n.Dir, "kube-scheduler", "nsenter", n.ns.command(nil, n.bin.scheduler,
		"--kubeconfig="+n.API.Kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[0]))...)
	if err != nil {
		return err
	}
	n.controllerManager, err = kubeapi.Spawn(n.Dir, "kube-controller-manager", "nsenter", n.ns.command(nil, n.bin.controllerManager,
		"--kubeconfig="+n.API.Kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[1]),
		"--service-account-private-key-file="+filepath.Join(n.API.Dir, "sa.key"),
		"--root-ca-file="+filepath.Join(n.API.Dir, "certs", "apiserver.crt"),
		"--use-service-account-credentials=false", "--allocate-node-cidrs=false")...)
	return err
}
