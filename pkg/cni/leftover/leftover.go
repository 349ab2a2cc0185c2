// Package leftover holds the rules by which an attachment's record is judged
// left over and undone, so that the CNI plugin (taking over a device at ADD,
// DEL, CNI GC) and devplumbctl gc judge and undo alike: whether its device is
// still its pod's, whether its netns is gone, and what the DEL of its
// recorded delegates runs.
package leftover

import (
	"os"
	"slices"

	"github.com/containernetworking/cni/libcni"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
)

// DeviceGone reports, from the kubelet's answer about rec's pod, whether the
// device rec holds is no longer that pod's: podFound says the kubelet lists
// the pod, devices are the pod's device IDs of rec.ResourceName (see
// PodDevices). A device the caller injected (Multus's runtimeConfig.deviceID:
// no resource recorded) is judged by the same rule against all the pod's
// devices, since it holds that device for every resource. A record of a pod
// CNI_ARGS did not name is never judged: nothing ties it to a kubelet answer.
func DeviceGone(rec *attachment.Record, podFound bool, devices []string) bool {
	if !rec.Pod.Known() {
		return false
	}
	if rec.Claim != nil {
		// A DRA device: the kubelet reports a claim only for the containers
		// that reference it (a network-only claim never), so the pod's
		// presence is what it can tell; the claim lives as long as the pod.
		return !podFound
	}
	return !podFound || !slices.Contains(devices, rec.DeviceID)
}

// PodDevices are the device IDs DeviceGone judges rec by, from the pod's
// device IDs per resource name: those of rec's resource, or every one of them
// for an injected device.
func PodDevices(rec *attachment.Record, byResource map[string][]string) []string {
	if rec.ResourceName != "" {
		return byResource[rec.ResourceName]
	}
	var all []string
	for _, ids := range byResource {
		all = append(all, ids...)
	}
	return all
}

// DevicesByResource are a pod's device IDs per resource name, as the kubelet's
// PodResources answer lists them (all containers).
func DevicesByResource(pod *podresourcesv1.PodResources) map[string][]string {
	by := map[string][]string{}
	for _, ctr := range pod.GetContainers() {
		for _, d := range ctr.GetDevices() {
			by[d.GetResourceName()] = append(by[d.GetResourceName()], d.GetDeviceIds()...)
		}
	}
	return by
}

// NetnsGone reports whether a netns path no longer exists, or was never
// recorded (an ADD that did not get that far).
func NetnsGone(path string) bool {
	if path == "" {
		return true
	}
	_, err := os.Stat(path)
	return err != nil
}

// ExistingNetns is path while it exists, else "": a DEL of a sandbox already
// gone runs without a netns, as CNI allows (the interface went with it).
func ExistingNetns(path string) string {
	if NetnsGone(path) {
		return ""
	}
	return path
}

// RecordedDelegate is what the DEL of rec's delegates runs: the conflist and
// the runtime arguments its ADD used, with the netns only while it exists.
// list is nil when the ADD never got as far as recording its delegates.
func RecordedDelegate(rec *attachment.Record) (*libcni.NetworkConfigList, *libcni.RuntimeConf, error) {
	if len(rec.Delegate) == 0 {
		return nil, nil, nil
	}
	list, err := delegate.ListFromBytes(rec.Delegate)
	if err != nil {
		return nil, nil, err
	}
	rt := &libcni.RuntimeConf{ContainerID: rec.ContainerID, IfName: rec.IfName, NetNS: ExistingNetns(rec.NetNS),
		Args: rec.CNIArgs, CapabilityArgs: rec.CapabilityArgs}
	return list, rt, nil
}
