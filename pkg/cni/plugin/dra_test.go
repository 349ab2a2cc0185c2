package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/dradevice"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// draEnv is kubeEnv's node whose pod got its device from a DRA claim the
// kubelet reports with the CDI device example.com/vf=0000:01:02.5.
func draEnv(t *testing.T, cdi ...string) (*kubeEnv, *podresourcestest.Server) {
	k := newKubeEnv(t)
	pr := podresourcestest.NewServer(t)
	pr.SetPod(&v1.PodResources{Namespace: "default", Name: "p1", Containers: []*v1.ContainerResources{{
		Name: "app", DynamicResources: []*v1.DynamicResource{podresourcestest.Claim("default", "p1-net",
			podresourcestest.Device("netdev.devplumb.io", "node1", "vf-5", cdi...))},
	}}})
	k.conf["podResourcesSocket"] = pr.Socket
	k.conf["resourceName"] = "example.com/vf"
	delete(k.conf, "kubeconfig")
	store := devinfo.NewStore(k.conf["deviceInfoDir"].(string))
	info := &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version, Pci: &devinfo.PciDevice{PciAddress: "0000:01:02.5"}}
	if err := store.WriteDP("example.com/vf", "0000:01:02.5", info); err != nil {
		t.Fatal(err)
	}
	return k, pr
}

// The local path: with no kubeconfig at all, resourceName finds the DRA
// device the kubelet reports by its CDI device, hands its ID and the DP
// device-info to the delegate, and the state records the claim's device
// (what DEL needs to remove the claim's status).
func TestDRALocalDevice(t *testing.T) {
	k, _ := draEnv(t, "example.com/vf=0000:01:02.5")
	if err := k.p.Add(k.args()); err != nil {
		t.Fatal(err)
	}
	recs := k.records()
	want := dradevice.Claim{Namespace: "default", Name: "p1-net", Driver: "netdev.devplumb.io", Pool: "node1", Device: "vf-5"}
	if len(recs) != 1 || recs[0].DeviceID != "0000:01:02.5" || recs[0].Claim == nil || *recs[0].Claim != want {
		t.Fatalf("state %+v, want device 0000:01:02.5 of %+v", recs, want)
	}
	raw, err := os.ReadFile(filepath.Join(k.root, "rec", "ADD-c1_net1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var flat bytes.Buffer
	if err := json.Compact(&flat, raw); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flat.String(), `"deviceID":"0000:01:02.5"`) {
		t.Errorf("the delegate did not get deviceID 0000:01:02.5: %s", raw)
	}
	if err := k.p.Del(k.args()); err != nil {
		t.Fatal(err)
	}
	if recs := k.records(); len(recs) != 0 {
		t.Errorf("state after DEL: %+v", recs)
	}
}

// A claim the kubelet reports without a CDI device of the resource, and no
// kubeconfig for the API path: a clear "no device" naming both ways.
func TestDRANoCDIDeviceNoAPI(t *testing.T) {
	k, _ := draEnv(t, "example.com/other=0000:01:02.5")
	err := k.p.Add(k.args())
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrNoDevice || !strings.Contains(te.Msg, "k8s.cni.cncf.io/resourceName=example.com/vf") {
		t.Fatalf("ADD: %v", err)
	}
	if recs := k.records(); len(recs) != 0 {
		t.Errorf("state after a failed ADD: %+v", recs)
	}
}

// "resourceClaim" needs a Kubernetes client that reads claims: one that
// cannot fails ADD saying so, before anything is taken.
func TestDRAResourceClaimNeedsDRAClient(t *testing.T) {
	k, _ := draEnv(t)
	k.conf["kubeconfig"] = "/etc/cni/kc"
	k.conf["resourceClaim"] = "net"
	err := k.p.Add(k.args())
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrKube || !strings.Contains(te.Details, "cannot read ResourceClaims") {
		t.Fatalf("ADD: %v", err)
	}
	if recs := k.records(); len(recs) != 0 {
		t.Errorf("state after a failed ADD: %+v", recs)
	}
}
