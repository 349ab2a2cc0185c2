package plugin

import (
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/types"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/cni/dradevice"
	"github.com/devplumb/devplumb/pkg/cni/leftover"
)

// checkAssigned refuses an explicit device ID (Multus's runtimeConfig.deviceID,
// or the config's "deviceID") that the kubelet did not assign to this pod:
// trusted blindly, a NAD or a confused caller could hand the pod another
// pod's device. res narrows the check to one resource when the config names
// one. "trustDeviceID" turns the check off, for a caller that is trusted
// (docs/security.md) or a node with no kubelet; so does a call that names
// no pod, as there is no pod to check against.
func (f *finder) checkAssigned(id, res string) *types.Error {
	if f.conf.TrustDeviceID || !f.pod.Known() {
		return nil
	}
	pod, cerr := f.kubeletPod(res)
	if cerr != nil {
		cerr.Msg = fmt.Sprintf("cannot check that device %s was assigned to pod %s (set \"trustDeviceID\": true to trust the caller): %s",
			id, f.pod, cerr.Msg)
		return cerr
	}
	if slices.Contains(assignedIDs(pod, res), id) {
		return nil
	}
	if res != "" {
		// A network-only claim's device: the kubelet does not report it,
		// the API server (with a kubeconfig) does.
		devs, _ := f.apiDevices(res, pod)
		if slices.ContainsFunc(devs, func(d dradevice.Device) bool { return d.ID == id }) {
			return nil
		}
	}
	what := "any resource"
	if res != "" {
		what = "resource " + res
	}
	return cniError(ErrNoDevice, fmt.Sprintf("pod %s: device %s (%s) is not a device of %s the kubelet assigned to the pod "+
		"(the kubelet returned %s): refusing it, it may be another pod's", f.pod, id, f.deviceIDSource(), what, describe(pod)), nil)
}

// deviceIDSource says where the explicit device ID came from.
func (f *finder) deviceIDSource() string {
	if f.conf.RuntimeConfig.DeviceID != "" {
		return "runtimeConfig.deviceID, passed by the caller"
	}
	return "the config's \"deviceID\""
}

// assignedIDs are the pod's device IDs the kubelet reports, of res or of
// every resource when res is "": device-plugin devices and, by the CDI rule,
// DRA devices.
func assignedIDs(pod *v1.PodResources, res string) []string {
	var ids []string
	for r, devs := range leftover.DevicesByResource(pod) {
		if res == "" || r == res {
			ids = append(ids, devs...)
		}
	}
	for _, d := range dradevice.LocalAll(pod, res) {
		ids = append(ids, d.ID)
	}
	return ids
}
