package dra_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/netdev/dramode"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
)

// deviceTaints tells whether the API server stores ResourceSlice device taints:
// DRADeviceTaints is on by default from 1.36 (beta), GA in 1.37. On 1.35 it drops them.
func deviceTaints(t *testing.T) bool {
	t.Helper()
	return serverAtLeast(t, 1, 36)
}

// healthWatch is one kubelet health stream: every report it received, as device name ->
// health ("HEALTHY", "UNHEALTHY: <message>"), in order.
type healthWatch chan map[string]string

// watchHealth opens the kubelet's health stream at the driver's endpoint as a kubelet
// 1.37 (v1) does or, with alpha, as one of 1.34-1.36 does (v1alpha1).
func (n *driverNode) watchHealth(alpha bool) healthWatch {
	n.t.Helper()
	info, err := n.registrationInfo()
	e2etest.Must(n.t, err)
	service := map[bool]string{false: drahealthv1.DRAResourceHealthService, true: drahealthv1alpha1.DRAResourceHealthService}[alpha]
	if !slices.Contains(info.SupportedVersions, service) {
		n.t.Fatalf("registration offers %v, not %s", info.SupportedVersions, service)
	}
	conn := drvDial(n.t, info.Endpoint)
	ctx, cancel := context.WithCancel(context.Background())
	n.t.Cleanup(cancel)
	var recv func() (map[string]string, error)
	if alpha {
		stream, err := drahealthv1alpha1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1alpha1.NodeWatchResourcesRequest{})
		e2etest.Must(n.t, err)
		recv = func() (map[string]string, error) {
			r, err := stream.Recv()
			got := map[string]string{}
			for _, d := range r.GetDevices() {
				got[d.GetDevice().GetDeviceName()] = d.GetHealth().String()
			}
			return got, err
		}
	} else {
		stream, err := drahealthv1.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
		e2etest.Must(n.t, err)
		recv = func() (map[string]string, error) {
			r, err := stream.Recv()
			got := map[string]string{}
			for _, d := range r.GetDevices() {
				h := d.GetHealth().String()
				if d.GetMessage() != "" {
					h += ": " + d.GetMessage()
				}
				got[d.GetDevice().GetDeviceName()] = h
			}
			return got, err
		}
	}
	out := make(healthWatch, 1000)
	go func() {
		defer close(out)
		for {
			got, err := recv()
			if err != nil {
				return
			}
			select {
			case out <- got:
			default: // the test reads no more
			}
		}
	}()
	return out
}

// wait reads reports until one satisfies cond.
func (w healthWatch) wait(t *testing.T, what string, cond func(map[string]string) bool) {
	t.Helper()
	timeout := time.After(time.Minute)
	var last map[string]string
	for {
		select {
		case got, ok := <-w:
			if !ok {
				t.Fatalf("%s: health stream ended; last report %v", what, last)
			}
			if last = got; cond(got) {
				return
			}
		case <-timeout:
			t.Fatalf("%s: last report %v", what, last)
		}
	}
}

// TestDriverTaintsUnhealthyDevices: netdev-dp --mode dra on the real API server. The
// VFs of a PF whose link goes down and a removed socket get the NoSchedule taint in the
// slice (on 1.35, which drops taints, they leave it instead), and the kubelet's health
// stream, v1 and v1alpha1 alike, says they are unhealthy and why; when the link is up
// and the socket back, the taints go and the stream says healthy.
func TestDriverTaintsUnhealthyDevices(t *testing.T) {
	n := newDriverNode(t)
	l := n.listen("vhu2.sock")
	n.start()
	var vfs []string
	for i := range 4 {
		vfs = append(vfs, dramode.DeviceName(drvResVF, fmt.Sprintf("0000:01:01.%d", i)))
	}
	sock2 := dramode.DeviceName(drvResVhost, "vhu2.sock")
	unhealthy := append(slices.Clone(vfs), sock2)
	n.waitDevices("seven untainted devices", func(m map[string]resourceapi.Device) bool {
		return len(m) == 7 && len(taintedDevices(t, m)) == 0
	})
	v1, alpha := n.watchHealth(false), n.watchHealth(true)
	for _, w := range []healthWatch{v1, alpha} {
		w.wait(t, "all healthy", func(r map[string]string) bool {
			return len(r) == 7 && !slices.ContainsFunc(slices.Collect(maps.Values(r)), func(h string) bool { return h != "HEALTHY" })
		})
	}

	sysfstest.SetOperState(t, n.sysfs, "0000:01:00.0", "ens1f0", "down")
	l.Close()
	t.Logf("the API server keeps device taints: %v", deviceTaints(t))
	if deviceTaints(t) {
		n.waitDevices("VFs and the removed socket tainted", func(m map[string]resourceapi.Device) bool {
			return len(m) == 7 && slices.Equal(taintedDevices(t, m), slices.Sorted(slices.Values(unhealthy)))
		})
	} else {
		n.waitDevices("VFs and the removed socket left out", func(m map[string]resourceapi.Device) bool { return len(m) == 2 })
	}
	v1.wait(t, "v1: VFs and socket unhealthy, with the reason", func(r map[string]string) bool {
		for _, vf := range vfs {
			if r[vf] != "UNHEALTHY: PF ens1f0 link down" {
				return false
			}
		}
		return r[sock2] == "UNHEALTHY: socket removed"
	})
	alpha.wait(t, "v1alpha1: VFs and socket unhealthy", func(r map[string]string) bool {
		return !slices.ContainsFunc(unhealthy, func(d string) bool { return r[d] != "UNHEALTHY" })
	})

	sysfstest.SetOperState(t, n.sysfs, "0000:01:00.0", "ens1f0", "up")
	n.listen("vhu2.sock")
	n.waitDevices("taints gone", func(m map[string]resourceapi.Device) bool {
		return len(m) == 7 && len(taintedDevices(t, m)) == 0
	})
	v1.wait(t, "v1: healthy again", func(r map[string]string) bool {
		return !slices.ContainsFunc(unhealthy, func(d string) bool { return r[d] != "HEALTHY" })
	})
}

// taintedDevices names the devices with the driver's unhealthy taint, sorted, and fails
// on a taint of another kind: NoSchedule, the driver's key, a time the API server set.
func taintedDevices(t *testing.T, m map[string]resourceapi.Device) []string {
	t.Helper()
	var out []string
	for name, d := range m {
		for _, taint := range d.Taints {
			if taint.Key != dramode.TaintKey(drvDriver) || taint.Effect != resourceapi.DeviceTaintEffectNoSchedule || taint.TimeAdded == nil {
				t.Errorf("device %s taint %+v", name, taint)
			}
		}
		if len(d.Taints) > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
