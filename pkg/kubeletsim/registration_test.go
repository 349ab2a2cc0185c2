package kubeletsim_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devplumb/devplumb/pkg/base/resourcename"
	"github.com/devplumb/devplumb/pkg/kubeletsim"
	"github.com/devplumb/devplumb/pkg/kubeletsim/kubeletsimtest"
)

func TestValidateResourceName(t *testing.T) {
	for name, ok := range map[string]bool{
		"example.com/vf":          true,
		"intel.com/sriov_net_A":   true,
		"openshift.io/mlx5-vf":    true,
		"vf":                      false, // not domain-qualified
		"kubernetes.io/vf":        false, // native namespace
		"sub.kubernetes.io/vf":    false,
		"requests.example.com/vf": false,
		"Example.com/vf":          false, // the domain must be lower case
		"example.com/":            false,
		"example.com/-vf":         false,
		"example.com/a/b":         false,
	} {
		err := resourcename.Validate(name)
		if (err == nil) != ok {
			t.Errorf("resourcename.Validate(%q) = %v, want ok=%v", name, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), `the ResourceName "`+name+`" is invalid`) {
			t.Errorf("error %q lacks the kubelet's wording", err)
		}
	}
}

func TestRegisterRejects(t *testing.T) {
	n := startNode(t, root(t))
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("d1"))
	for _, tc := range []struct{ version, resource, endpoint, want string }{
		{"v1alpha", vf, "vf.sock", `requested API version "v1alpha" is not supported by kubelet`},
		{pluginapi.Version, "vf", "vf.sock", `the ResourceName "vf" is invalid`},
		{pluginapi.Version, "kubernetes.io/vf", "vf.sock", "is invalid"},
		{pluginapi.Version, vf, "../vf.sock", "must be a file name in the device plugin directory"},
		{pluginapi.Version, vf, "", "endpoint is empty"},
		{pluginapi.Version, vf, "kubelet.sock", "the kubelet's own socket"},
	} {
		err := p.Register(t.Context(), tc.version, tc.resource, tc.endpoint)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%q, %q, %q) = %v, want %q", tc.version, tc.resource, tc.endpoint, err, tc.want)
		}
	}
	// Nobody serves the endpoint: the registration fails when the plugin's
	// deadline passes, and nothing is registered.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := p.Register(ctx, pluginapi.Version, vf, "absent.sock"); err == nil {
		t.Error("Register with no plugin server succeeded")
	}
	if n.Registered(vf) {
		t.Error("a failed registration left an endpoint")
	}
}

func TestControlClient(t *testing.T) {
	dir := root(t)
	if _, err := kubeletsim.NewControlClient(dir); err == nil || !strings.Contains(err.Error(), "nodesim serve --root") {
		t.Fatalf("NewControlClient with no node: %v", err)
	}
	n := startNode(t, dir)
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("d1", 0), kubeletsimtest.Dev("d2", 1))
	p.Start(t.Context(), false)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	c, err := kubeletsim.NewControlClient(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.AddPod(t.Context(), pod("p", ctr("x", 2)))
	if err != nil {
		t.Fatal(err)
	}
	r := a.Containers[0].Resources[0]
	if got := a.Devices(vf); len(got) != 2 || r.Response.GetAnnotations()["stub/ids"] != "d1,d2" || r.NUMANodes["d2"][0] != 1 {
		t.Fatalf("AddPod over the socket = %+v", a)
	}
	if _, err := c.AddPod(t.Context(), pod("p", ctr("x", 1))); !errors.Is(err, kubeletsim.ErrPodExists) {
		t.Errorf("duplicate AddPod: %v", err)
	}
	if _, err := c.AddPod(t.Context(), pod("Bad_Name")); !errors.Is(err, kubeletsim.ErrInvalidPod) {
		t.Errorf("invalid AddPod: %v", err)
	}
	if _, err := c.AddPod(t.Context(), pod("q", ctr("x", 1))); !errors.Is(err, kubeletsim.ErrAdmission) ||
		!strings.Contains(err.Error(), "Available: 0") {
		t.Errorf("AddPod with no free device: %v", err)
	}
	pods, err := c.Pods(t.Context())
	if err != nil || len(pods) != 1 || pods[0].Name != "p" {
		t.Fatalf("Pods = %+v, %v", pods, err)
	}
	res, err := c.Resources(t.Context())
	if err != nil || len(res[vf]) != 2 {
		t.Fatalf("Resources = %v, %v", res, err)
	}
	if err := c.DelPod(t.Context(), "ns", "p"); err != nil {
		t.Fatal(err)
	}
	if err := c.DelPod(t.Context(), "ns", "p"); !errors.Is(err, kubeletsim.ErrPodNotFound) {
		t.Errorf("DelPod twice: %v", err)
	}
}

// TestSocketRegisteredTwiceLeaks: as kubelet 1.37, a registration of a socket
// the node is connected to is refused, and the refusal makes the node forget
// the live connection: when the plugin stops, its endpoint stays registered
// with healthy devices, allocations dial the missing socket, and the socket is
// refused again. Only a restart of the node clears it.
func TestSocketRegisteredTwiceLeaks(t *testing.T) {
	dir := root(t)
	n := startNode(t, dir)
	p := kubeletsimtest.NewPlugin(t, n.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("d1"))
	p.Start(t.Context(), false)
	if err := n.WaitRegistered(t.Context(), vf); err != nil {
		t.Fatal(err)
	}
	err := p.Register(t.Context(), pluginapi.Version, vf, "vf.sock")
	if err == nil || !strings.Contains(err.Error(), "device plugin already connected: "+n.PluginDir()+"/vf.sock") {
		t.Fatalf("second registration of a live socket: %v", err)
	}
	p.Stop()
	os.Remove(n.PluginDir() + "/vf.sock")
	// Nothing to wait for: the node must not react to the stream's end.
	time.Sleep(100 * time.Millisecond)
	if res := n.Resources()[vf]; !n.Registered(vf) || len(res) != 1 || !res[0].Healthy() {
		t.Fatalf("leaked endpoint: registered %v, devices %+v", n.Registered(vf), res)
	}
	if _, err := n.AddPod(t.Context(), pod("p", ctr("x", 1))); err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("AddPod through the leaked endpoint: %v", err)
	}
	n.Stop()
	if _, err := os.Stat(n.RegistrationSocket()); err != nil {
		t.Fatalf("kubelet.sock removed at stop (the kubelet leaves it): %v", err)
	}
	n2 := startNode(t, dir)
	p2 := kubeletsimtest.NewPlugin(t, n2.PluginDir(), vf, "vf.sock", kubeletsimtest.Dev("d1"), kubeletsimtest.Dev("d2"))
	p2.Start(t.Context(), false)
	if err := n2.WaitResources(t.Context(), func(r map[string][]kubeletsim.Device) bool { return len(r[vf]) == 2 }); err != nil {
		t.Fatal(err)
	}
}
