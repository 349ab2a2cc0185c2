package node_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/netdev/dramode"
)

// TestDRADeviceHealthOnTheRealNode: netdev-dp in DRA mode (deployments/dra/) on the real
// kubelet 1.37, kube-scheduler and containerd. A pod holds one of the two hostdev
// devices (veth ends ens2f0, ens2f1); its link is deleted. The driver taints the device
// NoSchedule in its ResourceSlice and tells the kubelet over the health stream: the
// pod's status.containerStatuses[].allocatedResourcesStatus says Unhealthy (the
// kubelet's ResourceHealthStatus gate, on by default since 1.36). The real scheduler then
// gives a second pod the healthy device and a third none: it stays Pending, unschedulable.
// When the link is back the taint goes and the status says Healthy; once the first pod is
// gone the third pod gets its device.
func TestDRADeviceHealthOnTheRealNode(t *testing.T) {
	needKube136(t, "device taints and the kubelet's ResourceHealthStatus")
	draMode(t)
	tmpl := claimTemplate(t, "hostdev-health", draClass)
	held := createClaimPod(t, "dra-health-held", tmpl, true, nil)
	waitRunning(t, held)
	sick := allocated(t, held, draResource)
	healthy := map[string]string{"ens2f0": "ens2f1", "ens2f1": "ens2f0"}[sick.id]
	if healthy == "" {
		t.Fatalf("pod %s got device %s, not one of the veth ends", held.Name, sick.id)
	}

	l, err := netlink.LinkByName(sick.id)
	e2etest.Must(t, err)
	e2etest.Must(t, netlink.LinkDel(l))          // and its peer with it
	t.Cleanup(func() { ensureLink(t, sick.id) }) // before draMode's cleanup: the DaemonSet counts 2
	waitTaint(t, sick, true)
	waitDeviceHealth(t, held, sick, "Unhealthy")

	second := createClaimPod(t, "dra-health-second", tmpl, true, nil)
	waitRunning(t, second)
	if got := allocated(t, second, draResource); got.id != healthy {
		t.Fatalf("the scheduler gave pod %s device %s, want the healthy %s", second.Name, got.id, healthy)
	}
	third := createClaimPod(t, "dra-health-third", tmpl, true, nil)
	waitUnschedulable(t, third)

	ensureLink(t, sick.id)
	waitTaint(t, sick, false)
	waitDeviceHealth(t, held, sick, "Healthy")
	if p, err := nd.Client.CoreV1().Pods("default").Get(ctx(t), third.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("pod %s scheduled (node %q, %v) while both devices are held", third.Name, p.Spec.NodeName, err)
	}
	deletePod(t, held)
	waitRunning(t, third)
	if got := allocated(t, third, draResource); got.id != sick.id {
		t.Errorf("pod %s got device %s, want %s, free again", third.Name, got.id, sick.id)
	}
}

// ensureLink creates the veth end name (with its peer, as deploy does) unless it exists.
func ensureLink(t *testing.T, name string) {
	t.Helper()
	if _, err := netlink.LinkByName(name); err == nil {
		return
	}
	hostNetdevs(t, name)
}

// waitTaint waits until the device carries the driver's NoSchedule taint in the
// ResourceSlice (want) or no taint at all.
func waitTaint(t *testing.T, d draDevice, want bool) {
	t.Helper()
	waitFor(t, fmt.Sprintf("device %s (%s) tainted: %v", d.name, d.id, want), func(c context.Context) error {
		list, err := nd.Client.ResourceV1().ResourceSlices().List(c, metav1.ListOptions{
			FieldSelector: "spec.driver=" + draDriver + ",spec.nodeName=" + d.pool})
		if err != nil {
			return err
		}
		for _, s := range list.Items {
			for _, dev := range s.Spec.Devices {
				if dev.Name != d.name {
					continue
				}
				tainted := slices.ContainsFunc(dev.Taints, func(taint resourceapi.DeviceTaint) bool {
					return taint.Key == dramode.TaintKey(draDriver) && taint.Effect == resourceapi.DeviceTaintEffectNoSchedule
				})
				if tainted != want || (!want && len(dev.Taints) > 0) {
					return fmt.Errorf("taints %+v", dev.Taints)
				}
				return nil
			}
		}
		return errors.New("not in the driver's slices")
	})
}

// waitDeviceHealth waits until the kubelet reports the device's health in the pod's
// container status: an allocatedResourcesStatus entry "claim:<pod claim>" (kubelet 1.37:
// "claim:net") holds the device, named by its CDI device ID (the driver's answer to
// prepare, "example.com/hostdev=ens2f0"), with health.
func waitDeviceHealth(t *testing.T, pod *corev1.Pod, d draDevice, health corev1.ResourceHealthStatus) {
	t.Helper()
	waitFor(t, fmt.Sprintf("pod %s: device %s %s in allocatedResourcesStatus", pod.Name, d.name, health), func(c context.Context) error {
		p, err := nd.Client.CoreV1().Pods(pod.Namespace).Get(c, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var seen []string
		for _, cs := range p.Status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				for _, r := range rs.Resources {
					seen = append(seen, fmt.Sprintf("%s: %s %s", rs.Name, r.ResourceID, r.Health))
					if strings.HasPrefix(string(rs.Name), "claim:") && string(r.ResourceID) == d.cdiName() && r.Health == health {
						t.Logf("pod %s container %s: %s", pod.Name, cs.Name, seen[len(seen)-1])
						return nil
					}
				}
			}
		}
		return fmt.Errorf("allocatedResourcesStatus %q", seen)
	})
}

// waitUnschedulable waits until the scheduler has found no node for the pod.
func waitUnschedulable(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	waitFor(t, "pod "+pod.Name+" unschedulable", func(c context.Context) error {
		p, err := nd.Client.CoreV1().Pods(pod.Namespace).Get(c, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				t.Logf("pod %s: %s", pod.Name, cond.Message)
				return nil
			}
		}
		return fmt.Errorf("node %q, conditions %+v", p.Spec.NodeName, p.Status.Conditions)
	})
}
