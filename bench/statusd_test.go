package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/bench/statuscall"
)

// The status daemon writes an ADD's network-status entry and its claim's device entry
// before it answers, and takes the claim's away before it answers a DEL and the pod's
// after; a call for a pod that does not exist is refused with the API server's word
// for it.
func TestStatusDaemonWritesTheEntry(t *testing.T) {
	k, d, claim := statusFixture(t)
	socket := d.ln.Addr().String()
	result := `{"cniVersion":"1.0.0","interfaces":[{"name":"net1","mac":"02:00:00:00:00:01","sandbox":"/run/netns/x"}],` +
		`"ips":[{"address":"192.0.2.7/24","interface":0}]}`
	add := statuscall.Call{Add: true, Namespace: podNS, Pod: "p1", Network: "net-a", Result: []byte(result), Claim: claim}
	if err := statuscall.Ask(socket, add); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if got := annotation(t, k, "p1"); !strings.Contains(got, `"net-a"`) || !strings.Contains(got, "192.0.2.7") {
		t.Errorf("network-status after ADD: %q, want net-a's entry with 192.0.2.7", got)
	}
	if got := claimDevices(t, k, "p1-claim"); len(got) != 1 || got[0].Device != "nic-1" || got[0].NetworkData == nil ||
		got[0].NetworkData.InterfaceName != "net1" || len(got[0].NetworkData.IPs) != 1 || got[0].NetworkData.IPs[0] != "192.0.2.7/24" {
		t.Errorf("claim's status.devices after ADD: %+v, want nic-1 with net1 and 192.0.2.7/24", got)
	}
	if err := statuscall.Ask(socket, statuscall.Call{Namespace: podNS, Pod: "p1", Network: "net-a", Claim: claim}); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got := claimDevices(t, k, "p1-claim"); len(got) != 0 {
		t.Errorf("claim's status.devices once DEL answered: %+v, want none", got)
	}
	awaitNoAnnotation(t, k, "p1")
	add.Pod = "nobody"
	if err := statuscall.Ask(socket, add); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("ADD of a pod that does not exist: %v, want the API server's not found", err)
	}
}

// statusFixture is an API server with pod p1 and its allocated claim p1-claim, and a
// status daemon with a client of it.
func statusFixture(t *testing.T) (*kubeNode, *statusDaemon, *statuscall.Claim) {
	t.Helper()
	k := testKube(t)
	if _, err := k.pod("p1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod, err := k.srv.Client.CoreV1().Pods(podNS).Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.allocatedClaim(ctx, pod, "p1-claim", "nic", nil, draDevice{name: "nic-1"}); err != nil {
		t.Fatal(err)
	}
	d, err := startStatusDaemon(k.srv.Kubeconfig, filepath.Join(t.TempDir(), "statusd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	return k, d, &statuscall.Claim{Name: "p1-claim", Driver: draDriver, Pool: kubeNodeName, Device: "nic-1"}
}

// awaitNoAnnotation waits for pod name's network-status to go: after DEL answered.
func awaitNoAnnotation(t *testing.T, k *kubeNode, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for annotation(t, k, name) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("network-status still %q 30 s after DEL answered", annotation(t, k, name))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// claimDevices is claim name's status.devices.
func claimDevices(t *testing.T, k *kubeNode, name string) []resourcev1.AllocatedDeviceStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := k.srv.Client.ResourceV1().ResourceClaims(podNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Status.Devices
}

// annotation is pod name's network-status annotation.
func annotation(t *testing.T, k *kubeNode, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := k.srv.Client.CoreV1().Pods(podNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Annotations[nadv1.NetworkStatusAnnot]
}
