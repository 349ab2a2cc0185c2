package plugin

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/podresources"
)

// 110 pods (the kubelet's default maxPods) start at once on one node, each
// ADD asking the kubelet at its default PodResources rate limit (100 QPS,
// burst 10): no ADD fails and each pod holds its own device.
func TestBurstOf110PodsAtKubeletRateLimit(t *testing.T) {
	e := newExecEnv(t)
	// 110 calls need 1.1 s of the limiter's tokens; the bound is three times
	// the production one so that a loaded test machine (-race, other
	// packages) does not decide the result, only the limiter does.
	e.p.Timeout = 3 * podresources.DefaultTimeout
	var all []*v1.PodResources
	for i := range 110 {
		p := &v1.PodResources{Namespace: "default", Name: fmt.Sprintf("p%d", i), Containers: []*v1.ContainerResources{{
			Name: "app", Devices: []*v1.ContainerDevices{{ResourceName: "example.com/vf", DeviceIds: []string{fmt.Sprintf("dev%d", i)}}},
		}}}
		all = append(all, p)
		e.pr.SetPod(p)
	}
	errs := make([]error, len(all))
	_, _ = captureStdout(t, func() error {
		var wg sync.WaitGroup
		for i, p := range all {
			a := e.args("net1")
			a.ContainerID = "c-" + p.Name
			a.Args = strings.NewReplacer("K8S_POD_NAME=p1;", "K8S_POD_NAME="+p.Name+";", "K8S_POD_UID=u1", "K8S_POD_UID=u-"+p.Name).Replace(a.Args)
			wg.Go(func() { errs[i] = e.p.Add(a) })
		}
		wg.Wait()
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("ADD of pod p%d: %v", i, err)
		}
	}
	held := map[string]string{}
	for _, r := range e.state() {
		if r.DeviceID != "dev"+strings.TrimPrefix(r.Pod.Name, "p") {
			t.Errorf("pod %s holds %s", r.Pod.Name, r.DeviceID)
		}
		held[r.DeviceID] = r.Pod.Name
	}
	if len(held) != len(all) {
		t.Errorf("%d devices held after 110 ADDs", len(held))
	}
	if calls := e.pr.Calls("Get"); calls <= len(all) {
		t.Errorf("%d Get calls for %d ADDs: the limiter refused none, the test proves nothing", calls, len(all))
	}
}
