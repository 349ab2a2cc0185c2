package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestKubeletAndNetdevDPRestart (scenario 5): under Multus thick, the kubelet restarts
// under a running pod whose device devplumb (the delegate of
// deployments/nads/multus-delegation.yaml) moved into it: netdev-dp registers again with
// the new kubelet, the pod keeps its device, and a new pod gets the other one through the
// same multus-daemon, which outlives the kubelet. Then netdev-dp is restarted by its
// DaemonSet: it adopts its device-info files and no pod loses anything.
func TestKubeletAndNetdevDPRestart(t *testing.T) {
	deployed(t)
	c := ctx(t)
	multusAsNodeCNI(t, multusThick)
	net1 := map[string]string{nadv1.NetworkAttachmentAnnot: "netdev-net@net1"}
	first := createPodAnnotated(t, "before-restart", map[string]string{"example.com/hostdev": "1"}, net1)
	waitRunning(t, first)
	dev := podDevices(t, first, "example.com/hostdev")

	registered := registrations(t)
	sock := nd.HostPath("/var/lib/kubelet/device-plugins/kubelet.sock")
	old, err := os.Stat(sock)
	e2etest.Must(t, err)
	nd.StopKubelet()
	e2etest.Must(t, nd.StartKubelet())
	var sockAt time.Time
	waitFor(t, "the new kubelet's socket", func(context.Context) error {
		st, err := os.Stat(sock)
		if err != nil {
			return err
		}
		// A new socket may get the old one's inode number: the change time tells.
		if os.SameFile(st, old) && st.ModTime().Equal(old.ModTime()) {
			return fmt.Errorf("%s is still the old kubelet's", sock)
		}
		sockAt = time.Now()
		return nil
	})
	waitFor(t, "netdev-dp registering with the new kubelet", func(context.Context) error {
		if n := registrations(t); n <= registered {
			return fmt.Errorf("%d registrations of example.com/hostdev in the kubelet's log, %d before the restart", n, registered)
		}
		return nil
	})
	// Logged, not asserted (no timed tests): the issue asks for 2 s.
	t.Logf("netdev-dp registered again at most %s after the new kubelet's socket was seen", time.Since(sockAt).Round(100*time.Millisecond))
	checkKept(t, first, dev)

	second := createPodAnnotated(t, "after-restart", map[string]string{"example.com/hostdev": "1"}, net1)
	waitRunning(t, second)
	if got := podDevices(t, second, "example.com/hostdev"); len(got) != 1 || got[0] == dev[0] {
		t.Fatalf("the new pod got %v, the first has %v", got, dev)
	}

	// netdev-dp restarted by its DaemonSet.
	pods, err := nd.Client.CoreV1().Pods("kube-system").List(c, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=netdev-dp"})
	e2etest.Must(t, err)
	dp := testenv.Files(t, nd.HostPath("/run/k8s.cni.cncf.io/devinfo/dp"))
	for _, p := range pods.Items {
		e2etest.Must(t, nd.Client.CoreV1().Pods("kube-system").Delete(c, p.Name, metav1.DeleteOptions{}))
	}
	waitFor(t, "a new netdev-dp pod", func(c context.Context) error {
		ps, err := nd.Client.CoreV1().Pods("kube-system").List(c, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=netdev-dp"})
		if err != nil {
			return err
		}
		if len(ps.Items) != 1 || ps.Items[0].Name == pods.Items[0].Name || ps.Items[0].Status.Phase != "Running" {
			return fmt.Errorf("netdev-dp pods: %s", podStates(c, "kube-system"))
		}
		return nil
	})
	waitDaemonSet(t, "kube-system", "netdev-dp")
	waitAllocatable(t, map[string]string{"example.com/hostdev": "2"})
	checkKept(t, first, dev)
	if got := testenv.Files(t, nd.HostPath("/run/k8s.cni.cncf.io/devinfo/dp")); strings.Join(got, " ") != strings.Join(dp, " ") {
		t.Errorf("device-info files before netdev-dp's restart %v, after %v", dp, got)
	}
}

// checkKept: the pod still runs with its device (once the restarted kubelet lists it
// again), which is still in it (not on the host).
func checkKept(t *testing.T, pod *corev1.Pod, dev []string) {
	t.Helper()
	p, err := nd.Client.CoreV1().Pods("default").Get(ctx(t), pod.GetName(), metav1.GetOptions{})
	e2etest.Must(t, err)
	if p.Status.Phase != "Running" {
		t.Fatalf("pod %s is %s", p.Name, p.Status.Phase)
	}
	waitFor(t, "PodResources listing "+p.Name+"'s device", func(c context.Context) error {
		got, err := podDevicesErr(c, p, "example.com/hostdev")
		if err != nil {
			return err
		}
		if strings.Join(got, ",") != strings.Join(dev, ",") {
			return fmt.Errorf("pod %s has %v, had %v", p.Name, got, dev)
		}
		return nil
	})
	if _, err := netlink.LinkByName(dev[0]); err == nil {
		t.Fatalf("%s is back on the host while its pod runs", dev[0])
	}
}

// registrations counts netdev-dp's registrations of example.com/hostdev in the kubelet's log.
func registrations(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(nd.Dir, "kubelet.log"))
	e2etest.Must(t, err)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "Got registration request from device plugin") && strings.Contains(l, "example.com/hostdev") {
			n++
		}
	}
	return n
}
