package node_test

import (
	"encoding/json"
	"errors"
	"os"
	"path"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/e2e/e2etest"
)

const draVhostResource = "example.com/vhostuser"

// draVhostConflist is devplumb alone in the node's conflist taking the device of the pod
// claim "net" (config resourceClaim), with a macvlan delegate on vhostMaster.
const draVhostConflist = `{
  "cniVersion": "1.0.0",
  "name": "devplumb-dra-vhost",
  "plugins": [{
    "type": "devplumb",
    "resourceClaim": "net",
    "delegate": {"type": "macvlan", "master": "` + vhostMaster + `", "mode": "bridge",
      "ipam": {"type": "static", "addresses": [{"address": "203.0.113.30/24"}]}}
  }]
}`

// TestDRAVhostUserClaim: a pod's container references a claim (from a template) for one
// of the vhost-user sockets netdev-dp in DRA mode publishes (class vhostuser.example.com);
// devplumb, the node's CNI with config resourceClaim, takes that claim's device. The
// driver's NodePrepareResources wrote the socket's DP device-info file and CDI spec;
// containerd mounted the socket into the container (CDI); the pod's network-status entry
// carries the vhost-user device-info and the claim's networkData the interface. Deleting
// the pod removes devplumb's status entry while the claim is allocated, and unprepare
// removes the DP file and the CDI spec entry; no CNI device-info file is left.
func TestDRAVhostUserClaim(t *testing.T) {
	draMode(t)
	vhostMasterUp(t)
	c := ctx(t)
	useConflist(t, "devplumb-dra-vhost", []byte(draVhostConflist))
	tmpl := claimTemplate(t, "vhost", "vhostuser.example.com")

	pod := createClaimPod(t, "dra-vhost", tmpl, true, nil)
	waitRunning(t, pod)
	d := allocated(t, pod, draVhostResource)
	sock := path.Join("/var/run/vswitch/vhu", d.id) // the DRA ConfigMap's socketDir
	store := devinfo.NewStore(nd.HostPath("/run/k8s.cni.cncf.io/devinfo"))
	if info, err := store.ReadDP(draVhostResource, d.id); err != nil || info.VhostUser == nil || info.VhostUser.Path != sock {
		t.Errorf("the driver's DP device-info file of %s: %+v, %v; want vhost-user path %s", d.id, info, err, sock)
	}
	entry := networkStatus(t, pod, "devplumb-dra-vhost", "eth0")
	if di := entry.DeviceInfo; di == nil || di.Type != devinfo.TypeVhostUser || di.VhostUser == nil ||
		di.VhostUser.Path != sock || di.VhostUser.Mode != devinfo.VhostUserModeClient {
		raw, _ := json.Marshal(entry)
		t.Errorf("network-status entry %s: want vhost-user device-info, mode client, path %s", raw, sock)
	}
	if v := podView(t, pod); !slices.Equal(v.sockets, []string{sock}) {
		t.Errorf("the pod sees sockets %v, want its claim's %s (mounted through CDI)", v.sockets, sock)
	}
	checkNetworkData(t, d, "eth0", "203.0.113.30/24", entry.Mac)

	w, err := nd.Client.ResourceV1().ResourceClaims("default").Watch(c, metav1.ListOptions{
		FieldSelector: "metadata.name=" + d.claim.Name, ResourceVersion: d.claim.ResourceVersion})
	e2etest.Must(t, err)
	defer w.Stop()
	deletePod(t, pod)
	checkStatusRemovedFirst(t, w, d)
	waitClaimsDeleted(t, d)
	waitUnprepared(t, d)
	if _, err := store.ReadDP(draVhostResource, d.id); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the DP device-info file of %s after unprepare: %v", d.id, err)
	}
	checkNoCNIFiles(t)
}
