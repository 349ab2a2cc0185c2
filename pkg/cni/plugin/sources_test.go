package plugin

import (
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// A device source: how one attachment's config names its device.
type source struct {
	name string
	dra  bool // the pod's devices come from a DRA claim the kubelet reports
	edit func(c map[string]any)
}

var sources = []source{
	{name: "runtimeConfig.deviceID (Multus)", edit: func(c map[string]any) {
		c["runtimeConfig"] = map[string]any{"deviceID": "0000:01:00.1"}
	}},
	{name: "deviceID", edit: func(c map[string]any) {
		delete(c, "resourceName")
		c["deviceID"] = "0000:01:00.1"
	}},
	{name: "resourceName (device plugin)", edit: func(map[string]any) {}},
	{name: "resourceName (DRA claim)", dra: true, edit: func(map[string]any) {}},
}

// Every pair of sources on one pod, their ADDs at once: no device is ever held twice, an
// attachment naming a device another holds fails with a clear error naming the holder,
// and one looking up its resource gets a device of the pod's.
func TestEveryPairOfSourcesOnOnePod(t *testing.T) {
	for i, a := range sources {
		for _, b := range sources[i+1:] {
			t.Run(a.name+" + "+b.name, func(t *testing.T) {
				for range 3 {
					runPair(t, a, b)
				}
			})
		}
	}
}

func runPair(t *testing.T, a, b source) {
	e := newExecEnv(t, "0000:01:00.1", "0000:01:00.2")
	setPairDevices(e, a.dra, b.dra)
	errs := e.addAtOnce(e.argsFor("net-a", "net1", a.edit), e.argsFor("net-b", "net2", b.edit))
	held := e.heldOnce()
	if errs[0] != nil && errs[1] != nil {
		t.Fatalf("both ADDs failed: %v; %v", errs[0], errs[1])
	}
	for i, err := range errs {
		if err == nil {
			continue
		}
		te := wantCode(t, "ADD", err, ErrNoFreeDevice)
		if holder := []string{"net2", "net1"}[i]; !strings.Contains(te.Msg+te.Details, "interface "+holder) {
			t.Errorf("%s's error %q / %q does not name the holder (%s)", []string{"net-a", "net-b"}[i], te.Msg, te.Details, holder)
		}
	}
	if want := 2 - countErrs(errs); len(held) != want {
		t.Errorf("%d devices held after %d successful ADDs: %v", len(held), want, held)
	}
}

// setPairDevices gives the pod its two devices from a device plugin (neither source is
// DRA), from a DRA claim (both are), or 0000:01:00.1 from a DRA claim and 0000:01:00.2
// from the device plugin (one is).
func setPairDevices(e *execEnv, draA, draB bool) {
	if !draA && !draB {
		return // newExecEnv's pod: both from the device plugin
	}
	claim := func(ids ...string) *v1.DynamicResource {
		var devs []*v1.ClaimResource
		for _, id := range ids {
			devs = append(devs, podresourcestest.Device("netdev.devplumb.io", "node1", "vf-"+id[len(id)-1:], "example.com/vf="+id))
		}
		return podresourcestest.Claim("default", "p1-net", devs...)
	}
	ctr := &v1.ContainerResources{Name: "app"}
	if draA && draB {
		ctr.DynamicResources = []*v1.DynamicResource{claim("0000:01:00.1", "0000:01:00.2")}
	} else {
		ctr.DynamicResources = []*v1.DynamicResource{claim("0000:01:00.1")}
		ctr.Devices = []*v1.ContainerDevices{{ResourceName: "example.com/vf", DeviceIds: []string{"0000:01:00.2"}}}
	}
	e.pr.SetPod(&v1.PodResources{Namespace: "default", Name: "p1", Containers: []*v1.ContainerResources{ctr}})
}

// addAtOnce runs the ADDs at the same time and returns their errors.
func (e *execEnv) addAtOnce(args ...*skel.CmdArgs) []error {
	errs := make([]error, len(args))
	_, _ = captureStdout(e.t, func() error { // the results the ADDs print
		var wg sync.WaitGroup
		for i, arg := range args {
			wg.Go(func() { errs[i] = e.p.Add(arg) })
		}
		wg.Wait()
		return nil
	})
	return errs
}

// heldOnce maps each device devplumb's records hold to the interface holding it, and fails
// the test when one is held twice.
func (e *execEnv) heldOnce() map[string]string {
	held := map[string]string{}
	for _, r := range e.state() {
		if other, dup := held[r.DeviceID]; dup {
			e.t.Fatalf("device %s held by %s and %s", r.DeviceID, other, r.IfName)
		}
		held[r.DeviceID] = r.IfName
	}
	return held
}

func countErrs(errs []error) int {
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	return n
}
