package node_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// readyBound bounds the waits for pods and devices on this loaded 2-core machine; it is
// not a speed assertion.
const readyBound = 3 * time.Minute

// TestDeployAsAUser applies deployments/ as a user would (RBAC, both DaemonSets as
// shipped, the example NADs) with the images built as `make images` builds them: the
// DaemonSets run, netdev-dp registers its resources with the kubelet (the node's
// allocatable shows them) even though Multus made the device-info dp/ directory with mode
// 000 before it, and the devplumb installer puts the binary and a working kubeconfig on
// the node.
func TestDeployAsAUser(t *testing.T) {
	deployed(t)
	waitAllocatable(t, map[string]string{"example.com/hostdev": "2", "example.com/vhostuser": "2", "example.com/sriov_vf": "0"})
	checkInstalled(t)
}

var (
	deployOnce sync.Once
	deployErr  string
)

// deployed deploys once for the package (the scenarios build on it) and fails the test
// if that deployment failed.
func deployed(t *testing.T) {
	t.Helper()
	deployOnce.Do(func() {
		done := false
		defer func() {
			if !done {
				deployErr = "deploying failed in " + t.Name()
			}
		}()
		deploy(t)
		done = true
	})
	if deployErr != "" {
		t.Fatal(deployErr)
	}
}

func deploy(t *testing.T) {
	c := ctx(t)
	// The devices the shipped netdev-dp ConfigMap names that this machine can have: the
	// two ports of a NIC without SR-IOV (veth ends here) and two vhost-user sockets a
	// vswitch made. There is no SR-IOV PF ens1f0: that resource has no devices. They
	// stay for the package's tests; TestMain removes them.
	hostNetdevs(t, "ens2f0", "ens2f1")
	vhostSockets(t, "vhu0", "vhu1")
	// The NAD client library (Multus, the SR-IOV device plugin) creates the device-info
	// directories with mode 000; netdev-dp, without CAP_DAC_OVERRIDE, must still use dp/,
	// and start (again) beside a cni/ it cannot list.
	devinfo := nd.HostPath("/run/k8s.cni.cncf.io/devinfo")
	e2etest.Must(t, os.MkdirAll(devinfo, 0o755))
	for _, kind := range []string{"dp", "cni"} {
		e2etest.Must(t, os.Mkdir(filepath.Join(devinfo, kind), 0))
	}
	e2etest.Must(t, nd.API.InstallNADCRD(c))

	dir := filepath.Join(testenv.ModuleRoot(), "deployments")
	nads, err := filepath.Glob(filepath.Join(dir, "nads", "*.yaml"))
	e2etest.Must(t, err)
	// node-policy.yaml too: devplumb's writes go through the admission policy that scopes
	// them to its node, with the token the installer took from its DaemonSet pod.
	files := []string{filepath.Join(dir, "rbac.yaml"), filepath.Join(dir, "node-policy.yaml"),
		filepath.Join(dir, "metrics-rbac.yaml"), filepath.Join(dir, "netdev-dp-rbac.yaml"),
		filepath.Join(dir, "devplumb-daemonset.yaml"), filepath.Join(dir, "netdev-dp-daemonset.yaml")}
	e2etest.Must(t, nd.Apply(c, append(files, nads...)...))

	waitDaemonSet(t, "kube-system", "devplumb")
	waitDaemonSet(t, "kube-system", "netdev-dp")
}

// checkInstalled: the installer put the image's devplumb (the entry point) and
// devplumb-direct (which it execs without an agent) into /opt/cni/bin, its node config
// (/etc/cni/net.d/devplumb.d/node.json) names its kubeconfig, and that kubeconfig
// reaches the API server (TLS verified) as the devplumb service account.
func checkInstalled(t *testing.T) {
	t.Helper()
	for _, b := range []string{"devplumb", "devplumb-direct"} {
		want, err := os.ReadFile(filepath.Join(buildDir, "images", "bin", b))
		e2etest.Must(t, err)
		got, err := os.ReadFile(nd.HostPath("/opt/cni/bin/" + b))
		e2etest.Must(t, err)
		if !bytes.Equal(got, want) {
			t.Errorf("/opt/cni/bin/%s (%d bytes) is not the image's %s (%d bytes)", b, len(got), b, len(want))
		}
	}
	data, err := os.ReadFile(nd.HostPath(nodeconfig.DefaultPath))
	e2etest.Must(t, err)
	n, err := nodeconfig.Parse(data)
	if err != nil || n.Kubeconfig != "/etc/cni/net.d/devplumb.d/devplumb.kubeconfig" {
		t.Fatalf("the installer's node config %s: %+v, %v: want its kubeconfig named", data, n, err)
	}
	kc := nd.HostPath(n.Kubeconfig)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	e2etest.Must(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	e2etest.Must(t, err)
	pods, err := nd.Client.CoreV1().Pods("kube-system").List(ctx(t), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=devplumb"})
	e2etest.Must(t, err)
	if len(pods.Items) != 1 {
		t.Fatalf("%d devplumb pods, want 1", len(pods.Items))
	}
	// RBAC gives devplumb get on pods: the kubeconfig works if this does.
	if _, err := cs.CoreV1().Pods("kube-system").Get(ctx(t), pods.Items[0].Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the installer's kubeconfig (server %s) does not work: %v", cfg.Host, err)
	}
}

// hostNetdevs creates veth pairs whose host ends have the given names, removed at the end.
func hostNetdevs(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		if l, err := netlink.LinkByName(name); err == nil {
			// Left by a killed run of this test (a veth whose peer is name+"p") is fine.
			if _, peer := netlink.LinkByName(name + "p"); l.Type() != "veth" || peer != nil {
				t.Fatalf("this host already has a link %s: the test needs that name", name)
			}
			e2etest.Must(t, netlink.LinkDel(l))
		}
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
		e2etest.Must(t, netlink.LinkAdd(veth))
		atExit(func() {
			// Either end deletes the pair, wherever the other end is.
			if l, err := netlink.LinkByName(name + "p"); err == nil {
				_ = netlink.LinkDel(l)
			}
		})
	}
}

// vhostSockets makes the sockets a vswitch would in the node's /var/run/vswitch/vhu.
func vhostSockets(t *testing.T, names ...string) {
	t.Helper()
	dir := nd.HostPath("/run/vswitch/vhu")
	e2etest.Must(t, os.MkdirAll(dir, 0o755))
	for _, n := range names {
		l, err := net.Listen("unix", filepath.Join(dir, n+".sock"))
		e2etest.Must(t, err)
		atExit(func() { l.Close() })
	}
}

func waitDaemonSet(t *testing.T, ns, name string) {
	t.Helper()
	waitFor(t, "DaemonSet "+ns+"/"+name+" ready", func(c context.Context) error {
		ds, err := nd.Client.AppsV1().DaemonSets(ns).Get(c, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := ds.Status; st.DesiredNumberScheduled < 1 || st.NumberReady != st.DesiredNumberScheduled {
			return fmt.Errorf("%d of %d ready; pods: %s", st.NumberReady, st.DesiredNumberScheduled, podStates(c, ns))
		}
		return nil
	})
}

func waitAllocatable(t *testing.T, want map[string]string) {
	t.Helper()
	waitFor(t, "allocatable devices", func(c context.Context) error {
		n, err := nd.Client.CoreV1().Nodes().Get(c, "devplumb-node", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for res, q := range want {
			got := n.Status.Allocatable[corev1.ResourceName(res)]
			if got.String() != q {
				return fmt.Errorf("allocatable %s = %s, want %s (allocatable: %v)", res, got.String(), q, n.Status.Allocatable)
			}
		}
		return nil
	})
}

// podStates is a short account of the namespace's pods for a failure message.
func podStates(c context.Context, ns string) string {
	pods, err := nd.Client.CoreV1().Pods(ns).List(c, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b bytes.Buffer
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "%s %s", p.Name, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, " (%s: %s)", w.Reason, w.Message)
			}
			if cs.LastTerminationState.Terminated != nil {
				fmt.Fprintf(&b, " (last exit %d: %s)", cs.LastTerminationState.Terminated.ExitCode, cs.LastTerminationState.Terminated.Message)
			}
		}
		b.WriteString("; ")
	}
	return b.String()
}

// waitFor polls check until it succeeds or readyBound passes, then fails with the node's logs.
func waitFor(t *testing.T, what string, check func(context.Context) error) {
	t.Helper()
	c := ctx(t)
	deadline := time.Now().Add(readyBound)
	for {
		err := check(c)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v\n%s", what, readyBound, err, nd.Logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
}
