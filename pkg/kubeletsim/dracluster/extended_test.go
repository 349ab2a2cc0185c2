package dracluster

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func ctr(name string, limits map[string]int64) corev1.Container {
	c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}}}
	for r, n := range limits {
		c.Resources.Requests[corev1.ResourceName(r)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return c
}

// The requests and mappings are the 1.37 scheduler's
// (createRequestsAndMappings): container-<i>-request-<j> with i counting init
// containers first and j the resource's index among the container's sorted
// resource names; a sidecar gets its own request; a plain init container
// reuses the requests of the containers after it and asks only for what
// they do not cover, the largest such request serving every init container.
func TestRequestsAndMappingsAsTheScheduler(t *testing.T) {
	const hd, vf = "example.com/hostdev", "example.com/vf"
	sidecar := ctr("proxy", map[string]int64{hd: 1})
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{ctr("setup", map[string]int64{hd: 4}), sidecar, ctr("check", map[string]int64{hd: 3})},
		Containers:     []corev1.Container{ctr("app", map[string]int64{"cpu": 1, vf: 1, hd: 2})},
	}}
	reqs, mappings := requestsAndMappings(pod, map[string]string{hd: "hostdev.example.com", vf: "vf.example.com"})
	var gotReqs []string
	for _, r := range reqs {
		gotReqs = append(gotReqs, fmt.Sprintf("%s %s %d", r.Name, r.Exactly.DeviceClassName, r.Exactly.Count))
	}
	wantReqs := []string{
		"container-0-request-0 hostdev.example.com 1", // setup: 4, minus the sidecar's 1 and app's 2 after it
		"container-1-request-0 hostdev.example.com 1", // proxy, the sidecar
		"container-3-request-1 hostdev.example.com 2", // app: cpu, example.com/hostdev, example.com/vf
		"container-3-request-2 vf.example.com 1",
	}
	if !reflect.DeepEqual(gotReqs, wantReqs) {
		t.Errorf("requests\n got %q\nwant %q", gotReqs, wantReqs)
	}
	var got []string
	for _, m := range mappings {
		got = append(got, m.ContainerName+" "+m.ResourceName+" "+m.RequestName)
	}
	want := []string{
		"proxy " + hd + " container-1-request-0", "app " + hd + " container-3-request-1",
		// setup reuses the requests of proxy and app (after it) and adds its own 1;
		// check reuses app's (proxy runs before it) and its own 1 is setup's.
		"setup " + hd + " container-1-request-0", "setup " + hd + " container-3-request-1", "setup " + hd + " container-0-request-0",
		"check " + hd + " container-3-request-1", "check " + hd + " container-0-request-0",
		"app " + vf + " container-3-request-2",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mappings\n got %q\nwant %q", got, want)
	}
}
