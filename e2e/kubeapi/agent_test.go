package kubeapi_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cni/agent"
	"github.com/devplumb/devplumb/pkg/cni/agent/agenttest"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// The node agent against the real API server, with the real client: ADD
// through it finds the resourceName on the NAD and writes the pod's
// network-status entry next to an existing one, DEL removes only its own,
// and an ADD of a pod whose object is gone fails after the delegates ran and
// is undone (the delegates' DEL, then rollback) with the device back on the
// host. One Kubernetes client serves all the calls.
func TestAgentNetworkStatus(t *testing.T) {
	n := newNode(t)
	_, nodeConfig := nodeconfigtest.Split(t, n.conf(nil))
	socket, builds := startAgent(t, nodeConfig)
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "dp-agent", nodeName, annotationWith(t, otherEntry))
	if err != nil {
		t.Fatal(err)
	}
	n.givePod(pod.Name)
	netns := testenv.NetNS(t).Path()
	call := func(cmd, podName, uid string) agenttest.Outcome {
		conf, err := json.Marshal(n.netConf(nil))
		e2etest.Must(t, err)
		return agenttest.Call(t, socket, &agentproto.Prepare{Command: cmd, ContainerID: "c1", Netns: netns,
			IfName: "net1", Args: n.podArgs(podName, uid), Path: testenv.CNIPlugins(t), StdinData: conf})
	}

	if o := call(agentproto.CmdAdd, pod.Name, string(pod.UID)); o.Err != nil || o.Committed == nil || o.Committed.Error != nil {
		t.Fatalf("ADD through the agent: %+v, %v", o.Committed, o.Err)
	}
	got := e2etest.NetworkStatus(t, srv.Client, "default", pod.Name)
	if len(got) != 2 || got[1].Name != "default/"+n.network || len(got[1].IPs) != 1 || got[1].IPs[0] != "192.0.2.10" {
		t.Fatalf("network-status %+v: want the existing entry, then the agent's for default/%s with 192.0.2.10", got, n.network)
	}
	if o := call(agentproto.CmdDel, pod.Name, string(pod.UID)); o.Err != nil || o.Committed == nil || o.Committed.Error != nil {
		t.Fatalf("DEL through the agent: %+v, %v", o.Committed, o.Err)
	}
	// The agent removes the entry after DEL answered.
	waitFor(t, "the DEL's network-status removal", func() error {
		if got := e2etest.NetworkStatus(t, srv.Client, "default", pod.Name); len(got) != 1 {
			return fmt.Errorf("network-status %+v", got)
		}
		return nil
	})
	wantStatus(t, e2etest.NetworkStatus(t, srv.Client, "default", pod.Name), otherEntry)

	gone, err := srv.CreatePod(e2etest.Ctx(t), "default", "dp-agent-gone", nodeName, nil)
	e2etest.Must(t, err)
	n.givePod(gone.Name)
	e2etest.Must(t, srv.DeletePod(e2etest.Ctx(t), "default", gone.Name))
	o := call(agentproto.CmdAdd, gone.Name, string(gone.UID))
	if o.Err != nil || o.Committed == nil || o.Committed.Error == nil || !o.Committed.Undo || o.RolledBack == nil {
		t.Fatalf("ADD of a pod gone: %+v, rollback %+v, %v: want an error, the undo and the rollback", o.Committed, o.RolledBack, o.Err)
	}
	if _, err := netlink.LinkByName(n.dev); err != nil {
		t.Errorf("device not back on the host after the undo: %v", err)
	}
	if b := builds.Load(); b != 1 {
		t.Errorf("%d Kubernetes clients built for one kubeconfig, want 1", b)
	}
}

// startAgent serves an agent with the real Kubernetes client and the node
// config nodeConfig until the test ends; it returns the socket and the count
// of clients built.
func startAgent(t *testing.T, nodeConfig string) (string, *atomic.Int32) {
	t.Helper()
	builds := &atomic.Int32{}
	socket := e2etest.ServeAgent(t, agent.Config{Build: "e2e", Log: slog.New(slog.NewTextHandler(os.Stderr, nil)), Timeout: 10 * time.Second,
		NodeConfig: nodeConfig,
		NewKube: func(kubeconfig string, timeout time.Duration, log *slog.Logger) (plugin.Kube, error) {
			builds.Add(1)
			c, err := kube.New(kubeconfig, timeout, log)
			if err != nil {
				return nil, err
			}
			return c, nil
		}})
	return socket, builds
}

// The agent's client of a kubeconfig (agent.NodeKube: its node's watches and
// its Event writer) writes the network-status of a pod the watches hold and
// records the Events "events": "all" asks for after the call returned: a
// Normal AddedInterface for the ADD, a Warning AttachmentFailed for an ADD
// of a pod the kubelet lists no device for.
func TestAgentNodeKubeRecordsEvents(t *testing.T) {
	n := newNode(t)
	_, nodeConfig := nodeconfigtest.Split(t, n.conf(nil))
	socket := e2etest.ServeAgent(t, agent.Config{Build: "e2e", Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Timeout: 10 * time.Second, NewKube: agent.NodeKube(nodeName, nil), NodeConfig: nodeConfig})
	pod, err := srv.CreatePod(e2etest.Ctx(t), "default", "dp-agent-events", nodeName, nil)
	e2etest.Must(t, err)
	n.givePod(pod.Name)
	conf, err := json.Marshal(n.netConf(map[string]any{"events": "all"}))
	e2etest.Must(t, err)
	call := func(cmd, netns string) agenttest.Outcome {
		return agenttest.Call(t, socket, &agentproto.Prepare{Command: cmd, ContainerID: "c1", Netns: netns,
			IfName: "net1", Args: n.podArgs(pod.Name, string(pod.UID)), Path: testenv.CNIPlugins(t), StdinData: conf})
	}
	netns := testenv.NetNS(t).Path()
	if o := call(agentproto.CmdAdd, netns); o.Err != nil || o.Committed == nil || o.Committed.Error != nil {
		t.Fatalf("ADD through the agent: %+v, %v", o.Committed, o.Err)
	}
	if got := e2etest.NetworkStatus(t, srv.Client, "default", pod.Name); len(got) != 1 || got[0].Name != "default/"+n.network {
		t.Errorf("network-status %+v: want the agent's entry", got)
	}
	if o := call(agentproto.CmdDel, netns); o.Err != nil || o.Committed == nil || o.Committed.Error != nil {
		t.Fatalf("DEL through the agent: %+v, %v", o.Committed, o.Err)
	}
	// The kubelet no longer lists the device for the pod: ADD fails at prepare.
	n.pr.SetPod(&v1.PodResources{Namespace: "default", Name: pod.Name, Containers: []*v1.ContainerResources{{Name: "c"}}})
	if o := call(agentproto.CmdAdd, testenv.NetNS(t).Path()); o.Err != nil || o.Prepared == nil || o.Prepared.Error == nil {
		t.Fatalf("ADD of a pod without the device: %+v, %v; want its error at prepare", o.Prepared, o.Err)
	}
	reasons := map[string]string{}
	for _, e := range describeEvents(t, pod, 2) {
		reasons[e.Reason] = e.Type
	}
	if reasons["AddedInterface"] != corev1.EventTypeNormal || reasons["AttachmentFailed"] != corev1.EventTypeWarning {
		t.Errorf("events on the pod by reason %v: want a Normal AddedInterface and a Warning AttachmentFailed", reasons)
	}
}
