package dra_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// newRequestCounter is a counting proxy in front of the package's API server.
func newRequestCounter(t *testing.T) *kubeapi.RequestCounter {
	t.Helper()
	rc, err := kubeapi.NewRequestCounter(srv.URL)
	e2etest.Must(t, err)
	t.Cleanup(rc.Close)
	return rc
}

// TestCNIAPIRequests counts the requests the devplumb binary makes to the
// API server per ADD and DEL of a DRA attachment: the local path reads
// nothing for the device (it only writes the two statuses); the API path
// reads the pod, the claim and the slices of one driver on the node, once
// each, and network-status starts from that pod read instead of reading the
// pod's metadata again. `make bench` (P6) reports the same counts.
func TestCNIAPIRequests(t *testing.T) {
	rc := newRequestCounter(t)
	n := newCNINode(t)
	kc := filepath.Join(n.dir, "counted.kubeconfig")
	e2etest.Must(t, os.WriteFile(kc, []byte(kubeapi.Kubeconfig(rc.URL, srv.Token)), 0o600))
	dev := n.veth()
	n.slice(cniDev{"dev-0", attrs(dev, cniResource)})
	statuses := map[string]int{"GET pods (metadata)": 1, "PATCH pods (metadata)": 1, "PATCH resourceclaims/status": 1}
	for _, tc := range []struct {
		name   string
		report bool
		add    map[string]int
	}{
		{"local", true, statuses},
		{"api", false, map[string]int{"GET pods": 1, "GET resourceclaims": 1, "GET resourceslices": 1,
			"PATCH pods (metadata)": 1, "PATCH resourceclaims/status": 1}},
	} {
		claimName := "claim-" + cniRandom()
		pod := n.pod("pod-"+cniRandom(), claimName, false)
		n.claim(claimName, nil, []*corev1.Pod{pod}, "dev-0")
		if tc.report {
			n.report(pod, claimName, []string{"dev-0"}, []string{dev})
		}
		conf := n.conf(map[string]any{"resourceName": cniResource, "kubeconfig": kc})
		netns := testenv.NetNS(t).Path()
		rc.Take()
		if res := n.run("ADD", conf, netns, pod, "net1"); res.Code != 0 {
			t.Fatalf("%s ADD: %+v", tc.name, res)
		}
		add := requestsOnly(rc.Take())
		if res := n.run("DEL", conf, netns, pod, "net1"); res.Code != 0 {
			t.Fatalf("%s DEL: %+v", tc.name, res)
		}
		del := requestsOnly(rc.Take())
		if !maps.Equal(add, tc.add) || !maps.Equal(del, statuses) {
			t.Errorf("%s path: ADD %s; DEL %s\nwant ADD %s; DEL %s", tc.name, kubeapi.DescribeCounts(add),
				kubeapi.DescribeCounts(del), kubeapi.DescribeCounts(tc.add), kubeapi.DescribeCounts(statuses))
		}
		t.Logf("API requests, %s path: ADD %d (%s), DEL %d (%s)", tc.name, kubeapi.Requests(add), kubeapi.DescribeCounts(add),
			kubeapi.Requests(del), kubeapi.DescribeCounts(del))
	}
}

func requestsOnly(counts map[string]int) map[string]int {
	delete(counts, kubeapi.Connections)
	return counts
}

// Network-status starting from the pod the client read for its claims
// costs no read when the pod did not change, and loses nothing when it did:
// the patch's resourceVersion precondition fails, the edit reads the pod
// again and keeps the other writer's entry.
func TestNetworkStatusFromThePodReadForClaims(t *testing.T) {
	rc := newRequestCounter(t)
	kc := filepath.Join(t.TempDir(), "counted.kubeconfig")
	e2etest.Must(t, os.WriteFile(kc, []byte(kubeapi.Kubeconfig(rc.URL, srv.Token)), 0o600))
	mine := nadv1.NetworkStatus{Name: "default/mine", Interface: "net1", IPs: []string{"192.0.2.10"}}
	for _, tc := range []struct {
		name    string
		changed bool // another writer changes the pod after the client read it
		want    map[string]int
	}{
		{"unchanged", false, map[string]int{"PATCH pods (metadata)": 1}},
		{"changed", true, map[string]int{"PATCH pods (metadata)": 2, "GET pods (metadata)": 1}},
	} {
		pod, err := srv.CreatePod(e2etest.Ctx(t), cniNS, "ns-"+cniRandom(), "", nil)
		e2etest.Must(t, err)
		c, err := kube.New(kc, 10*time.Second, nil)
		e2etest.Must(t, err)
		_, err = c.Pod(e2etest.Ctx(t), cniNS, pod.Name, "")
		e2etest.Must(t, err)
		other := `[{"name":"other","interface":"eth0","ips":["192.0.2.2"]}]`
		if tc.changed {
			patch := `{"metadata":{"annotations":{"` + nadv1.NetworkStatusAnnot + `":` + strconv.Quote(other) + `}}}`
			_, err = srv.Client.CoreV1().Pods(cniNS).Patch(e2etest.Ctx(t), pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			e2etest.Must(t, err)
		}
		rc.Take()
		e2etest.Must(t, c.SetNetworkStatus(e2etest.Ctx(t), cniNS, pod.Name, string(pod.UID), mine))
		if got := requestsOnly(rc.Take()); !maps.Equal(got, tc.want) {
			t.Errorf("%s: requests %s, want %s", tc.name, kubeapi.DescribeCounts(got), kubeapi.DescribeCounts(tc.want))
		}
		var names []string
		for _, e := range e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name) {
			names = append(names, e.Name)
		}
		want := []string{"default/mine"}
		if tc.changed {
			want = []string{"other", "default/mine"}
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s: network-status entries %v, want %v", tc.name, names, want)
		}
	}
}
