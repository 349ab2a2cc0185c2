package dra_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// metadataCDI tells the CDI device that mounts a request's device metadata (KEP-5304),
// which kubeletplugin adds to the first device of each request, from the devices' own.
func metadataCDI(name string) bool { return strings.HasPrefix(name, drvDriver+"/metadata=") }

// devicesCDI are the CDI names that are not metadata mounts.
func devicesCDI(names []string) []string { return slices.DeleteFunc(slices.Clone(names), metadataCDI) }

// register is the kubelet's registration of the driver: GetInfo, then
// NotifyRegistrationStatus with the outcome.
func (n *driverNode) register(ok bool) {
	n.t.Helper()
	conn := drvDial(n.t, filepath.Join(n.registrar, drvDriver+"-reg.sock"))
	c := registerapi.NewRegistrationClient(conn)
	_, err := c.GetInfo(e2etest.Ctx(n.t), &registerapi.InfoRequest{})
	e2etest.Must(n.t, err)
	_, err = c.NotifyRegistrationStatus(e2etest.Ctx(n.t), &registerapi.RegistrationStatus{PluginRegistered: ok})
	if ok {
		e2etest.Must(n.t, err)
	}
}

// waitProbe polls url until it answers code with a body containing text.
func waitProbe(t *testing.T, url string, code int, text string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got, body := 0, ""
		if resp, err := http.Get(url); err != nil {
			body = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got, body = resp.StatusCode, string(b)
		}
		if got == code && strings.Contains(body, text) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d %q, want %d and %q", url, got, body, code, text)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wantMetrics(t *testing.T, base string, lines ...string) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	e2etest.Must(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range lines {
		if !strings.Contains(string(body), l+"\n") {
			t.Errorf("/metrics lacks %s", l)
		}
	}
}

// TestDriverMonitored runs netdev-dp --mode dra with --metrics-address and
// --health-grace=0 on the real API server, the test playing the kubelet: /readyz waits
// for the registration and the slices in the API server; /healthz fails while the driver
// is not registered, while its slices cannot be written (its RBAC taken away) and when
// the kubelet's registration socket is gone, and recovers; /metrics counts devices,
// slices, registrations, a kubelet restart, prepares and unprepares.
func TestDriverMonitored(t *testing.T) {
	n := newDriverNode(t)
	base := "http://" + testenv.FreeAddr(t)
	n.start("--metrics-address="+strings.TrimPrefix(base, "http://"), "--health-grace=0")
	waitProbe(t, base+"/healthz", 503, drvDriver+": not registered with the kubelet for")
	waitProbe(t, base+"/readyz", 503, "not registered with the kubelet")
	n.register(true)
	waitProbe(t, base+"/readyz", 200, "ok")
	waitProbe(t, base+"/healthz", 200, "ok")
	wantMetrics(t, base, `netdev_dp_devices{health="healthy",resource="example.com/vhostuser"} 2`,
		`netdev_dp_devices{health="healthy",resource="example.com/sriov_vf"} 4`, "netdev_dp_resource_slices 1",
		"netdev_dp_resource_slices_in_sync 1",
		`netdev_dp_plugin_events_total{event="registered",resource="netdev.devplumb.io"} 1`)

	n.preparesWithMetadata(t)
	wantMetrics(t, base, `netdev_dp_claims_total{op="prepare",result="ok"} 1`,
		`netdev_dp_claims_total{op="unprepare",result="ok"} 1`, `netdev_dp_claim_duration_seconds_count{op="prepare"} 1`,
		`netdev_dp_plugin_events_total{event="kubelet_restart",resource="netdev.devplumb.io"} 0`)

	// The slices cannot be written: the driver's RBAC is gone while a device appears.
	n.slicesStuck(t, base)

	// A kubelet restart registers the driver again.
	n.register(true)
	wantMetrics(t, base, `netdev_dp_plugin_events_total{event="kubelet_restart",resource="netdev.devplumb.io"} 1`)

	// The kubelet's side goes: no kubelet finds the driver again, so /healthz fails, and
	// the restart the liveness probe makes serves a new socket.
	e2etest.Must(t, os.Remove(filepath.Join(n.registrar, drvDriver+"-reg.sock")))
	waitProbe(t, base+"/healthz", 503, "registration socket "+filepath.Join(n.registrar, drvDriver+"-reg.sock")+" is gone")
	n.proc.Terminate(30 * time.Second)
	n.start("--metrics-address="+strings.TrimPrefix(base, "http://"), "--health-grace=0")
	n.register(true)
	waitProbe(t, base+"/healthz", 200, "ok")
	waitProbe(t, base+"/readyz", 200, "ok")
}

// slicesStuck takes the driver's ClusterRoleBinding away and adds a device: /healthz
// fails with the ResourceSlice controller's error; with the binding back, the slice
// holds the device and /healthz recovers.
func (n *driverNode) slicesStuck(t *testing.T, base string) {
	t.Helper()
	rbac := srv.Client.RbacV1().ClusterRoleBindings()
	crb, err := rbac.Get(e2etest.Ctx(t), "netdev-dp-dra", metav1.GetOptions{})
	e2etest.Must(t, err)
	restore := func() {
		back := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: crb.Name}, RoleRef: crb.RoleRef, Subjects: crb.Subjects}
		_, _ = rbac.Create(context.Background(), back, metav1.CreateOptions{})
	}
	t.Cleanup(restore)
	e2etest.Must(t, rbac.Delete(e2etest.Ctx(t), crb.Name, metav1.DeleteOptions{}))
	n.listen("vhu2.sock")
	waitProbe(t, base+"/healthz", 503, "published ResourceSlices not in the API server")
	waitProbe(t, base+"/healthz", 503, "forbidden")
	restore()
	n.waitDevices("the new socket", func(m map[string]resourceapi.Device) bool { return len(m) == 7 })
	waitProbe(t, base+"/healthz", 200, "ok")
	wantMetrics(t, base, "netdev_dp_resource_slices_in_sync 1", `netdev_dp_devices{health="healthy",resource="example.com/vhostuser"} 3`)
}

// preparesWithMetadata prepares a claim of a VF and a socket over the DRA socket, as the
// kubelet does: each request gets a CDI device mounting its metadata file, which holds
// each device's attributes (the PCI bus ID of the VF, the path of the socket); unprepare
// removes the files and specs.
func (n *driverNode) preparesWithMetadata(t *testing.T) {
	t.Helper()
	claim := n.allocateClaim("md-"+n.name, "sriov-vf.example.com", "vhostuser.example.com")
	dra := n.draClient()
	resp, err := dra.NodePrepareResources(e2etest.Ctx(t), prepareReq(claim))
	e2etest.Must(t, err)
	got := resp.Claims[string(claim.UID)]
	if got.GetError() != "" {
		t.Fatal(got.GetError())
	}
	var mdIDs []string
	for _, d := range got.GetDevices() {
		for _, id := range d.CdiDeviceIds {
			if metadataCDI(id) {
				mdIDs = append(mdIDs, id)
			}
		}
	}
	slices.Sort(mdIDs)
	if want := []string{drvDriver + "/metadata=" + string(claim.UID) + "_reqa", drvDriver + "/metadata=" + string(claim.UID) + "_reqb"}; !slices.Equal(mdIDs, want) {
		t.Fatalf("metadata CDI devices %v, want %v", mdIDs, want)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(n.cdiDir), cdiapi.WithAutoRefresh(false))
	e2etest.Must(t, err)
	for _, r := range claim.Status.Allocation.Devices.Results {
		attrs := n.metadataOf(t, cache, claim, r)
		id := n.deviceIDOf(r.Device)
		key, want := "resource.kubernetes.io/pciBusID", id
		if r.Request == "reqb" {
			key, want = drvDriver+"/socketPath", filepath.Join(n.sockDir, id)
		}
		if a, ok := attrs[resourceapi.QualifiedName(key)]; !ok || a.StringValue == nil || *a.StringValue != want {
			t.Errorf("request %s: metadata attribute %s = %+v, want %q (all: %v)", r.Request, key, a, want, attrs)
		}
	}
	un, err := dra.NodeUnprepareResources(e2etest.Ctx(t), &drapb.NodeUnprepareResourcesRequest{Claims: prepareReq(claim).Claims})
	e2etest.Must(t, err)
	if e := un.Claims[string(claim.UID)].GetError(); e != "" {
		t.Fatal(e)
	}
	if left := filesUnder(t, filepath.Join(n.plugins, drvDriver, "dra-device-metadata")); len(left) != 0 {
		t.Errorf("metadata left after unprepare: %v", left)
	}
	if left := filesUnder(t, n.cdiDir); len(left) != 0 {
		t.Errorf("CDI specs left after unprepare: %v", left)
	}
}

// metadataOf reads the metadata file the CDI spec of a request mounts, checks where it
// is mounted in the container, and returns the attributes of the allocated device.
func (n *driverNode) metadataOf(t *testing.T, cache *cdiapi.Cache, claim *resourceapi.ResourceClaim,
	r resourceapi.DeviceRequestAllocationResult) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	t.Helper()
	dev := cache.GetDevice(drvDriver + "/metadata=" + string(claim.UID) + "_" + r.Request)
	if dev == nil || len(dev.ContainerEdits.Mounts) != 1 {
		t.Fatalf("request %s: no CDI device mounting its metadata (%v)", r.Request, cache.ListDevices())
	}
	m := dev.ContainerEdits.Mounts[0]
	if want := metadata.ResourceClaimFilePath(drvDriver, claim.Name, r.Request); m.ContainerPath != want {
		t.Errorf("metadata mounted at %s, want %s", m.ContainerPath, want)
	}
	f, err := os.Open(m.HostPath)
	e2etest.Must(t, err)
	defer f.Close()
	var md metadata.DeviceMetadata
	var invalid error
	e2etest.Must(t, devicemetadata.DecodeMetadataFromStream(json.NewDecoder(f), &md,
		devicemetadata.DecodeMetadataWithValidationResult(&invalid)))
	if invalid != nil {
		t.Errorf("metadata of request %s does not validate: %v", r.Request, invalid)
	}
	if md.UID != claim.UID || len(md.Requests) != 1 || len(md.Requests[0].Devices) != 1 || md.Requests[0].Devices[0].Name != r.Device {
		t.Fatalf("metadata of request %s: %+v", r.Request, md)
	}
	return md.Requests[0].Devices[0].Attributes
}
