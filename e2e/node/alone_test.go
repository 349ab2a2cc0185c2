package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/node"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources"
)

// hostDeviceConflist is devplumb alone as the node's network named network: the pod's
// eth0 is its device of resourceName, moved by host-device with the static address, and
// devplumb writes its own network-status entry through the kubeconfig its installer wrote
// and named in the node config (/etc/cni/net.d/devplumb.d/node.json): a network config
// may not name one.
func hostDeviceConflist(network, resourceName, address string) []byte {
	return []byte(`{
  "cniVersion": "1.0.0",
  "name": "` + network + `",
  "plugins": [{
    "type": "devplumb",
    "resourceName": "` + resourceName + `",
    "injectDeviceID": ["device"],
    "delegate": {"type": "host-device", "ipam": {"type": "static", "addresses": [{"address": "` + address + `"}]}}
  }]
}`)
}

// aloneConflist is devplumb alone with example.com/hostdev devices.
var aloneConflist = hostDeviceConflist("devplumb-alone", "example.com/hostdev", "192.0.2.10/24")

// useConflist makes data the node's network (named network) until the test ends.
func useConflist(t *testing.T, network string, data []byte) {
	t.Helper()
	e2etest.Must(t, nd.SetConflist(ctx(t), network, data))
	t.Cleanup(func() { e2etest.Must(t, nd.SetConflist(context.Background(), "cluster", []byte(node.DefaultConflist))) })
}

// TestDevplumbAloneInTheConflist (scenario 3, then 4): with devplumb alone in the node's
// conflist, a pod gets as eth0 the device PodResources lists for it, and its
// network-status carries devplumb's entry. When the pod is deleted the device is back on
// the host and no CNI device-info file, claim or network state is left.
func TestDevplumbAloneInTheConflist(t *testing.T) {
	deployed(t)
	useConflist(t, "devplumb-alone", aloneConflist)

	pod := createPod(t, "alone", map[string]string{"example.com/hostdev": "1"})
	waitRunning(t, pod)
	devs := podDevices(t, pod, "example.com/hostdev")
	if len(devs) != 1 {
		t.Fatalf("PodResources lists %v for the pod, want one device", devs)
	}
	if _, err := netlink.LinkByName(devs[0]); err == nil {
		t.Errorf("%s (the pod's device) is still in the host's namespace", devs[0])
	}
	// netdev-dp answered Allocate with the device's CDI name (KEP-4009); containerd, with
	// CDI on, applied the CDI spec netdev-dp wrote: its variable is in the container.
	cdiEnv := cdispec.EnvName("example.com/hostdev", devs[0]) + "=" + devs[0]
	waitFor(t, "the CDI device's variable in the container", func(context.Context) error {
		if log := podLog(t, pod); !strings.Contains(log, cdiEnv) {
			return fmt.Errorf("container output has no %s:\n%s", cdiEnv, log)
		}
		return nil
	})
	entry := networkStatus(t, pod, "devplumb-alone", "eth0")
	if !slices.Contains(entry.IPs, "192.0.2.10") {
		t.Errorf("network-status entry %+v: want IP 192.0.2.10", entry)
	}

	deletePod(t, pod)
	waitFor(t, devs[0]+" back on the host", func(context.Context) error {
		_, err := netlink.LinkByName(devs[0])
		return err
	})
	for _, dir := range []string{"/run/k8s.cni.cncf.io/devinfo/cni", "/var/lib/cni/devplumb/attachments", "/var/lib/cni/networks/devplumb-alone"} {
		if left := testenv.Files(t, nd.HostPath(dir)); len(left) > 0 {
			t.Errorf("left in %s after the pod was deleted: %v", dir, left)
		}
	}
}

// createPod creates a busybox pod in default that prints its environment and sleeps,
// with the given resource limits.
func createPod(t *testing.T, name string, limits map[string]string) *corev1.Pod {
	t.Helper()
	return createPodAnnotated(t, name, limits, nil)
}

// createPodAnnotated is createPod with annotations.
func createPodAnnotated(t *testing.T, name string, limits, annotations map[string]string) *corev1.Pod {
	t.Helper()
	return createPodScript(t, name, limits, annotations, "env; exec sleep 100000")
}

// createPodScript is createPodAnnotated with the container's shell script.
func createPodScript(t *testing.T, name string, limits, annotations map[string]string, script string) *corev1.Pod {
	t.Helper()
	one := int64(1)
	rl := corev1.ResourceList{}
	for r, q := range limits {
		rl[corev1.ResourceName(r)] = resource.MustParse(q)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &one,
			Containers: []corev1.Container{{Name: "c", Image: node.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script}, Resources: corev1.ResourceRequirements{Limits: rl}}},
		},
	}
	out, err := nd.Client.CoreV1().Pods("default").Create(ctx(t), pod, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(func() { deletePod(t, out) })
	return out
}

func waitRunning(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	waitFor(t, "pod "+pod.Name+" Running", func(c context.Context) error {
		p, err := nd.Client.CoreV1().Pods(pod.Namespace).Get(c, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s; pods: %s; events: %s", p.Status.Phase, podStates(c, pod.Namespace), events(c, pod))
		}
		return nil
	})
}

// deletePod deletes the pod and waits until the kubelet has stopped it and it is gone.
func deletePod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	one := int64(1)
	err := nd.Client.CoreV1().Pods(pod.Namespace).Delete(ctx(t), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &one})
	if apierrors.IsNotFound(err) {
		return
	}
	e2etest.Must(t, err)
	waitFor(t, "pod "+pod.Name+" gone", func(c context.Context) error {
		_, err := nd.Client.CoreV1().Pods(pod.Namespace).Get(c, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
}

// events are the pod's events, for a failure message.
func events(c context.Context, pod *corev1.Pod) string {
	evs, err := nd.Client.CoreV1().Events(pod.Namespace).List(c, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return strings.Join(out, "; ")
}

// podDevices are the pod's devices of resource, as the kubelet's PodResources API says.
func podDevices(t *testing.T, pod *corev1.Pod, res string) []string {
	t.Helper()
	devs, err := podDevicesErr(ctx(t), pod, res)
	e2etest.Must(t, err)
	return devs
}

func podDevicesErr(c context.Context, pod *corev1.Pod, res string) ([]string, error) {
	cl, err := podresources.New(nd.HostPath("/var/lib/kubelet/pod-resources/kubelet.sock"))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Devices(c, pod.Namespace, pod.Name, res)
}

// networkStatus is the pod's network-status entry for network and interface.
func networkStatus(t *testing.T, pod *corev1.Pod, network, ifName string) nadv1.NetworkStatus {
	t.Helper()
	list := e2etest.NetworkStatus(t, nd.Client, pod.Namespace, pod.Name)
	for _, e := range list {
		if e.Name == network && e.Interface == ifName {
			return e
		}
	}
	t.Fatalf("network-status %+v has no entry for %s %s", list, network, ifName)
	return nadv1.NetworkStatus{}
}

// podLog is what the pod's container wrote, from the kubelet's log files.
func podLog(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	return containerLog(t, pod, "*")
}

// containerLog is what the pod's containers matching the glob container wrote, restarts included.
func containerLog(t *testing.T, pod *corev1.Pod, container string) string {
	t.Helper()
	logs, err := filepath.Glob(nd.HostPath(filepath.Join("/var/log/pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), container, "*.log")))
	e2etest.Must(t, err)
	var b strings.Builder
	for _, l := range logs {
		data, err := os.ReadFile(l)
		e2etest.Must(t, err)
		b.Write(data)
	}
	return b.String()
}

// copyExec copies an executable into the node.
func copyExec(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}
