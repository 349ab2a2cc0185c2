package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
)

const stormPods = 20

// TestTwentyPodsAtOnce (scenario 6): the user adds a resource of 20 netdevs to netdev-dp's
// ConfigMap (netdev-dp restarted by its DaemonSet reads it) and a NAD like
// deployments/nads/multus-delegation.yaml for it; under Multus thick, 20 pods created at
// once, one device and one attachment of that NAD each, all run, no device twice, and
// each pod's device (the one PodResources lists) has left the host and is the pod's net1,
// as the pod itself sees it. Twenty CNI calls then go through one multus-daemon at once.
// Deleting the pods brings every device back.
func TestTwentyPodsAtOnce(t *testing.T) {
	names := stormDevices(t)
	multusAsNodeCNI(t, multusThick)
	nad := nadVariant(t, "netdev-net", "storm-net", func(_ map[string]any, annotations map[string]string) {
		annotations["k8s.v1.cni.cncf.io/resourceName"] = "example.com/storm"
	})
	annotations := map[string]string{nadv1.NetworkAttachmentAnnot: nad + "@net1"}

	pods := make([]*corev1.Pod, stormPods)
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pods[i] = createPodScript(t, fmt.Sprintf("storm-%02d", i), map[string]string{"example.com/storm": "1"}, annotations, linksScript)
		}()
	}
	wg.Wait()
	checkBurst(t, pods, "net1")
	for _, p := range pods {
		deletePod(t, p)
	}
	waitDevicesBack(t, names)
}

var (
	stormOnce  sync.Once
	stormNames []string
)

// stormDevices makes, once for the package, the host netdevs dpstorm00 to dpstorm19, and
// sees that netdev-dp serves them as example.com/storm (again, after a test re-applied its
// shipped ConfigMap); it returns their names.
func stormDevices(t *testing.T) []string {
	t.Helper()
	deployed(t)
	stormOnce.Do(func() {
		var names []string
		for i := range stormPods {
			names = append(names, fmt.Sprintf("dpstorm%02d", i))
		}
		hostNetdevs(t, names...)
		stormNames = names
	})
	if len(stormNames) != stormPods {
		t.Fatal("making the storm devices failed in an earlier test")
	}
	addStormResource(t)
	waitAllocatable(t, map[string]string{"example.com/storm": fmt.Sprint(stormPods)})
	return stormNames
}

// waitDevicesBack waits until every named device is on the host again.
func waitDevicesBack(t *testing.T, names []string) {
	t.Helper()
	waitFor(t, "every device back on the host", func(context.Context) error {
		var missing []string
		for _, n := range names {
			if _, err := netlink.LinkByName(n); err != nil {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("not back: %s", strings.Join(missing, " "))
		}
		return nil
	})
}

// addStormResource adds, unless it is there, example.com/storm (dpstorm00 to dpstorm19, not their peers
// dpstorm00p...) to the shipped ConfigMap's resources and restarts netdev-dp through its
// DaemonSet, as a user editing it would.
func addStormResource(t *testing.T) {
	t.Helper()
	c := ctx(t)
	cms := nd.Client.CoreV1().ConfigMaps("kube-system")
	cm, err := cms.Get(c, "netdev-dp", metav1.GetOptions{})
	e2etest.Must(t, err)
	conf := cm.Data["config.json"]
	if strings.Contains(conf, `"example.com/storm"`) {
		return // added before, and netdev-dp restarted then
	}
	i := strings.Index(conf, `"resources": [`)
	if i < 0 {
		t.Fatalf("netdev-dp ConfigMap has no resources list: %s", conf)
	}
	i += len(`"resources": [`)
	cm.Data["config.json"] = conf[:i] + `{"resourceName": "example.com/storm", "netdevs": {"names": ["dpstorm[0-9][0-9]"]}},` + conf[i:]
	_, err = cms.Update(c, cm, metav1.UpdateOptions{})
	e2etest.Must(t, err)
	pods, err := nd.Client.CoreV1().Pods("kube-system").List(c, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=netdev-dp"})
	e2etest.Must(t, err)
	for _, p := range pods.Items {
		e2etest.Must(t, nd.Client.CoreV1().Pods("kube-system").Delete(c, p.Name, metav1.DeleteOptions{}))
	}
}
