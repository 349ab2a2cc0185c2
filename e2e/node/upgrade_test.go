package node_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/images"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// upgradeFrom is the earlier release the upgrade test rolls from and back to: main as it
// landed with Kubernetes 1.37 support (its images were tagged ":dev", its records carry
// format version 1).
const upgradeFrom = "62521ee0c8f3892408db2a70f92dec5cf1f764a2"

// oldTag tags the images built from upgradeFrom, so the two releases are two images.
const oldTag = "v0.0.0-62521ee"

// TestUpgradeAndDowngrade: the node runs the earlier release (its DaemonSet manifests and
// its images) with a pod holding a device; the current manifests roll both DaemonSets to the
// current images, devplumb's while a second pod starts; the first pod keeps its device, and
// when it goes the new devplumb removes what the old one set up. Rolled back to the earlier
// release, a third pod starts and the old devplumb removes what the new one set up. No ADD or
// DEL fails, nothing is left.
func TestUpgradeAndDowngrade(t *testing.T) {
	// Before the node is set up: a shallow clone (CI's git clone --depth 1) lacks the
	// earlier release, and one that cannot fetch it skips this test alone.
	if err := testenv.FetchCommit(testenv.ModuleRoot(), upgradeFrom, t.Logf); err != nil {
		t.Skipf("needs a full clone (git fetch --unshallow) for the earlier release it builds: %v", err)
	}
	deployed(t)
	useConflist(t, "devplumb-alone", aloneConflist)
	old := oldRelease(t)
	t.Cleanup(func() { rollTo(t, currentDaemonSets(), currentRefs(t)) })

	rollTo(t, old, oldRefs(t))
	a := startHolding(t, "up-a")
	rollTo(t, currentDaemonSets(), currentRefs(t), func() { startHolding(t, "up-b") })
	stillHolds(t, a)
	releaseAndCheck(t, a)

	rollTo(t, old, oldRefs(t), func() { startHolding(t, "down-c") })
	for _, name := range []string{"up-b", "down-c"} {
		p, err := nd.Client.CoreV1().Pods("default").Get(ctx(t), name, metav1.GetOptions{})
		e2etest.Must(t, err)
		releaseAndCheck(t, &holding{pod: p, devs: podDevices(t, p, "example.com/hostdev")})
	}
	for _, dir := range []string{"/run/k8s.cni.cncf.io/devinfo/cni", "/var/lib/cni/devplumb/attachments"} {
		if left := testenv.Files(t, nd.HostPath(dir)); len(left) > 0 {
			t.Errorf("left in %s: %v", dir, left)
		}
	}
}

// holding is a pod and the devices the kubelet gave it.
type holding struct {
	pod  *corev1.Pod
	devs []string
}

// startHolding creates a pod with one example.com/hostdev device and waits until it runs
// with the device moved into it.
func startHolding(t *testing.T, name string) *holding {
	t.Helper()
	p := createPod(t, name, map[string]string{"example.com/hostdev": "1"})
	waitRunning(t, p)
	h := &holding{pod: p, devs: podDevices(t, p, "example.com/hostdev")}
	stillHolds(t, h)
	return h
}

// stillHolds: the pod runs and its device is not in the host's namespace; no sandbox
// failed and devplumb recorded no failure on it.
func stillHolds(t *testing.T, h *holding) {
	t.Helper()
	p, err := nd.Client.CoreV1().Pods("default").Get(ctx(t), h.pod.Name, metav1.GetOptions{})
	e2etest.Must(t, err)
	if p.Status.Phase != corev1.PodRunning || len(h.devs) != 1 {
		t.Fatalf("pod %s: phase %s, devices %v", p.Name, p.Status.Phase, h.devs)
	}
	if _, err := netlink.LinkByName(h.devs[0]); err == nil {
		t.Errorf("pod %s's device %s is back in the host's namespace", p.Name, h.devs[0])
	}
	if evs := events(ctx(t), p); strings.Contains(evs, "FailedCreatePodSandBox") || strings.Contains(evs, "FailedKillPod") {
		t.Errorf("pod %s: a CNI call failed: %s", p.Name, evs)
	}
	if ev, err := devplumbEvent(ctx(t), p.Namespace, p.Name); err == nil {
		t.Errorf("pod %s: devplumb recorded a failure: %s", p.Name, ev.Note)
	}
}

// releaseAndCheck deletes the pod and waits for its device back on the host.
func releaseAndCheck(t *testing.T, h *holding) {
	t.Helper()
	stillHolds(t, h)
	deletePod(t, h.pod)
	waitFor(t, h.devs[0]+" back on the host after "+h.pod.Name, func(context.Context) error {
		_, err := netlink.LinkByName(h.devs[0])
		return err
	})
}

// manifests are a release's two DaemonSet manifests.
type manifests struct{ devplumb, netdevDP string }

// oldRelease builds upgradeFrom's images (from its source, as `make images` builds them)
// into the node's containerd and returns its two DaemonSet manifests naming them.
func oldRelease(t *testing.T) manifests {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	e2etest.Must(t, os.MkdirAll(src, 0o755))
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", testenv.ModuleRoot(), upgradeFrom, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("the source of %s: %v\n%s", upgradeFrom, err, out)
	}
	built, err := images.Build(images.Options{Root: src, Out: filepath.Join(t.TempDir(), "images"), Version: oldTag})
	e2etest.Must(t, err)
	for _, tar := range built {
		e2etest.Must(t, nd.ImportImage(ctx(t), tar))
	}
	old := oldRefs(t)
	named := func(f string) string {
		b, err := os.ReadFile(filepath.Join(src, "deployments", f))
		e2etest.Must(t, err)
		s := strings.NewReplacer("image: devplumb:dev", "image: "+old.devplumb, "image: netdev-dp:dev", "image: "+old.netdevDP).Replace(string(b))
		p := filepath.Join(t.TempDir(), f)
		e2etest.Must(t, os.WriteFile(p, []byte(s), 0o644))
		return p
	}
	return manifests{devplumb: named("devplumb-daemonset.yaml"), netdevDP: named("netdev-dp-daemonset.yaml")}
}

// refs are a release's two image references.
type refs struct{ devplumb, netdevDP string }

func refsOf(t *testing.T, version string) refs {
	dp, nd, err := images.Refs(version)
	e2etest.Must(t, err)
	return refs{dp, nd}
}

func oldRefs(t *testing.T) refs { return refsOf(t, oldTag) }

func currentRefs(t *testing.T) refs {
	v, err := images.ShippedVersion(testenv.ModuleRoot())
	e2etest.Must(t, err)
	return refsOf(t, v)
}

func currentDaemonSets() manifests {
	dir := filepath.Join(testenv.ModuleRoot(), "deployments")
	return manifests{devplumb: filepath.Join(dir, "devplumb-daemonset.yaml"), netdevDP: filepath.Join(dir, "netdev-dp-daemonset.yaml")}
}

// rollTo rolls netdev-dp's DaemonSet and waits until its new pod is ready (registered with
// the kubelet), then rolls devplumb's while during runs (pods starting while it rolls) and
// waits for it. netdev-dp goes alone: from its old pod's exit until its new one registers,
// the kubelet holds its devices unhealthy and fails the admission of a pod asking for one
// (UnexpectedAdmissionError, whatever the CNI plugin does).
func rollTo(t *testing.T, m manifests, to refs, during ...func()) {
	t.Helper()
	e2etest.Must(t, nd.Apply(ctx(t), m.netdevDP))
	waitRolledOut(t, "netdev-dp", to.netdevDP)
	waitAllocatable(t, map[string]string{"example.com/hostdev": "2"})
	e2etest.Must(t, nd.Apply(ctx(t), m.devplumb))
	for _, f := range during {
		f()
	}
	waitRolledOut(t, "devplumb", to.devplumb)
}

// waitRolledOut waits until the DaemonSet name runs ref on the node (rolledOut).
func waitRolledOut(t *testing.T, name, ref string) {
	t.Helper()
	waitFor(t, "DaemonSet "+name+" rolled out to "+ref, func(c context.Context) error {
		return rolledOut(c, name, ref)
	})
}

// rolledOut: the DaemonSet's pods are all updated and ready, and run ref.
func rolledOut(c context.Context, name, ref string) error {
	ds, err := nd.Client.AppsV1().DaemonSets("kube-system").Get(c, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	st := ds.Status
	if st.ObservedGeneration < ds.Generation || st.UpdatedNumberScheduled != st.DesiredNumberScheduled ||
		st.NumberReady != st.DesiredNumberScheduled || st.NumberUnavailable > 0 {
		return fmt.Errorf("%d of %d updated, %d ready; pods: %s", st.UpdatedNumberScheduled, st.DesiredNumberScheduled, st.NumberReady, podStates(c, "kube-system"))
	}
	pods, err := nd.Client.CoreV1().Pods("kube-system").List(c, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		for _, ctr := range p.Spec.Containers {
			if ctr.Image != ref || p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s runs %s (terminating: %v)", p.Name, ctr.Image, p.DeletionTimestamp != nil)
			}
		}
	}
	return nil
}
