package dra_test

import (
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/cni/agent"
	"github.com/devplumb/devplumb/pkg/cni/agent/agenttest"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/nodecache"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestAgentAPIRequests counts what an ADD and a DEL through the node agent
// send the API server once its watches hold the node's objects (the
// watches' own requests apart): writes only
// (the pod's network-status and the claim's status), on the local path and
// on the API path alike, where devplumb-direct reads the pod, the claim and
// the slices (TestCNIAPIRequests). The first ADD builds the client and
// starts the watches; a claim is read when its pod reaches the node, which
// the pod does (bound) once the scheduler reserved its claims.
func TestAgentAPIRequests(t *testing.T) {
	rc := newRequestCounter(t)
	n := newCNINode(t)
	kc := filepath.Join(n.dir, "counted.kubeconfig")
	e2etest.Must(t, os.WriteFile(kc, []byte(kubeapi.Kubeconfig(rc.URL, srv.Token)), 0o600))
	m := nodecache.NewMetrics()
	conf, nodeConfig := nodeconfigtest.Split(t, n.conf(map[string]any{"resourceName": cniResource, "kubeconfig": kc}))
	socket := e2etest.ServeAgent(t, agent.Config{Build: "e2e", Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Timeout: 10 * time.Second, NewKube: agent.NodeKube(n.name, m), NodeConfig: nodeConfig})
	raw, err := json.Marshal(conf)
	e2etest.Must(t, err)
	call := func(cmd string, pod *corev1.Pod, netns string) agenttest.Outcome {
		return agenttest.Call(t, socket, &agentproto.Prepare{Command: cmd, ContainerID: "c-" + pod.Name, Netns: netns,
			IfName: "net1", Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + cniNS + ";K8S_POD_NAME=" + pod.Name + ";K8S_POD_UID=" + string(pod.UID),
			Path: testenv.CNIPlugins(t), StdinData: raw})
	}
	var dev string
	writes := map[string]int{"PATCH pods (metadata)": 1, "PATCH resourceclaims/status": 1}
	for i, tc := range []struct {
		name   string
		report bool
	}{{"warm-up", false}, {"local", true}, {"api", false}} {
		var pod *corev1.Pod
		claimName := "claim-" + cniRandom()
		if i == 0 { // the slice's one device, moved in by each ADD and back by its DEL
			dev, pod, claimName = n.oneDevicePod(false)
		} else {
			// As the scheduler does: the claim reserved for the pod, then the pod bound.
			pod = n.podOn("", "pod-"+cniRandom(), claimName, false)
			n.claim(claimName, nil, []*corev1.Pod{pod}, "dev-0")
			bind(t, pod, n.name)
		}
		if tc.report {
			n.report(pod, claimName, []string{"dev-0"}, []string{dev})
		}
		if i > 0 {
			waitHeld(t, m, i+1)
		}
		netns := testenv.NetNS(t).Path()
		rc.Take()
		if o := call(agentproto.CmdAdd, pod, netns); o.Err != nil || o.Committed == nil || o.Committed.Error != nil {
			t.Fatalf("%s ADD through the agent: %+v, %v", tc.name, o.Committed, o.Err)
		}
		add := callsOnly(rc.Take())
		if o := call(agentproto.CmdDel, pod, netns); o.Err != nil || (o.Committed != nil && o.Committed.Error != nil) {
			t.Fatalf("%s DEL through the agent: %+v, %v", tc.name, o.Committed, o.Err)
		}
		awaitRemovals(t, n, pod, claimName)
		del := callsOnly(rc.Take())
		t.Logf("API requests through the agent, %s: ADD %s; DEL %s", tc.name, kubeapi.DescribeCounts(add), kubeapi.DescribeCounts(del))
		if i > 0 && (!maps.Equal(add, writes) || !maps.Equal(del, writes)) {
			t.Errorf("%s path: ADD %s; DEL %s\nwant writes only: %s", tc.name, kubeapi.DescribeCounts(add),
				kubeapi.DescribeCounts(del), kubeapi.DescribeCounts(writes))
		}
	}
}

// awaitRemovals checks that a DEL through the agent removed the claim's
// networkData before it answered (the claim may be deallocated right after)
// and waits until the pod's network-status entry, which the agent removes
// after DEL answered, is gone too.
func awaitRemovals(t *testing.T, n *cniNode, pod *corev1.Pod, claimName string) {
	t.Helper()
	if st := deviceStatus(t, claimName, n.driver, "dev-0"); st != nil && st.NetworkData != nil {
		t.Errorf("claim %s still has devplumb's networkData when DEL answered", claimName)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(e2etest.NetworkStatus(t, srv.Client, cniNS, pod.Name)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the DEL's network-status removal on pod %s not written 30 s after DEL answered", pod.Name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bind binds pod to node, as the scheduler does once it reserved the pod's
// claims: the pod reaches the node's watch with its claims reserved.
func bind(t *testing.T, pod *corev1.Pod, node string) {
	t.Helper()
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	e2etest.Must(t, srv.Client.CoreV1().Pods(pod.Namespace).Bind(e2etest.Ctx(t), b, metav1.CreateOptions{}))
	pod.Spec.NodeName = node
}

// waitHeld waits until the agent's watches hold pods and claims pods each.
func waitHeld(t *testing.T, m *nodecache.Metrics, pods int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		held := m.Held()
		if held["pod"] >= pods && held["resourceclaim"] >= pods {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's watches hold %v, want %d pods and claims", held, pods)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// callsOnly are the requests of the calls: not the agent's watches (which
// read a pod's claims when the pod reaches the node) nor connections.
func callsOnly(counts map[string]int) map[string]int {
	maps.DeleteFunc(counts, func(k string, _ int) bool { return strings.HasSuffix(k, kubeapi.AgentWatch) })
	return requestsOnly(counts)
}
