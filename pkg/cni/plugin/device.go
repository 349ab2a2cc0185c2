package plugin

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
	"github.com/devplumb/devplumb/pkg/cni/dradevice"
	"github.com/devplumb/devplumb/pkg/cni/leftover"
	"github.com/devplumb/devplumb/podresources"
)

// noDeviceSource says what is missing. A config declaring the deviceID
// capability expects its caller (Multus) to pass the device; Multus passes
// one only for a pod that requests the resource its NAD's resourceName
// annotation names: that, not the config, is then what is missing.
func (c *call) noDeviceSource() *types.Error {
	if c.conf.Capabilities[delegate.CapDeviceID] {
		return cniError(ErrNoDeviceSource, fmt.Sprintf("pod %s/%s has no device for network %q: the caller passed no runtimeConfig.deviceID; "+
			"Multus passes one only when the pod's containers request the resource the NetworkAttachmentDefinition's "+
			"k8s.v1.cni.cncf.io/resourceName annotation names: request that resource in the pod, or set \"resourceName\" "+
			"(for a pod whose device comes from a DRA ResourceClaim, which Multus does not pass: \"resourceName\" and \"kubeconfig\")",
			c.pod.Namespace, c.pod.Name, c.conf.Name), nil)
	}
	return cniError(ErrNoDeviceSource, `no device source: set "resourceName", pass the device as runtimeConfig.deviceID `+
		`(capability "deviceID") or "deviceID", or set "kubeconfig" so devplumb reads resourceName from the NetworkAttachmentDefinition`, nil)
}

// resourceName is the configured resourceName, else (with no explicit
// device) the one the NetworkAttachmentDefinition names.
func (c *call) resourceName() (string, *types.Error) {
	if c.conf.ResourceName != "" || c.conf.ResourceClaim != "" || c.conf.DeviceIDFromConfig() != "" {
		return c.conf.ResourceName, nil
	}
	k, err := c.api.get()
	if err != nil {
		return "", cniError(ErrKube, "cannot build the Kubernetes client to read resourceName from the NetworkAttachmentDefinition", err)
	}
	if k == nil {
		return "", c.noDeviceSource()
	}
	ns, name := c.conf.NADRef(c.pod.Namespace)
	ctx, cancel := c.ctx()
	defer cancel()
	res, err := k.NADResourceName(ctx, ns, name)
	if err != nil {
		return "", cniError(ErrKube, fmt.Sprintf("cannot read resourceName of NetworkAttachmentDefinition %s/%s", ns, name), err)
	}
	if res == "" {
		return "", cniError(ErrNoDeviceSource, fmt.Sprintf("NetworkAttachmentDefinition %s/%s has no k8s.v1.cni.cncf.io/resourceName "+
			"annotation: add it or set \"resourceName\" in the config", ns, name), nil)
	}
	what := fmt.Sprintf("the k8s.v1.cni.cncf.io/resourceName annotation of NetworkAttachmentDefinition %s/%s", ns, name)
	if err := config.CheckResourceName(what, res); err != nil {
		return "", cniError(ErrNoDeviceSource, err.Error()+": fix the annotation", nil)
	}
	return res, nil
}

// candidates are the devices an attachment may take, in preference order,
// and their resource: what step 2 of ADD finds and step 3 takes one of.
type candidates struct {
	resourceName string
	ids          []string
	// dra are the DRA devices among ids, by ID: the taken one's
	// ResourceClaim goes into the state record.
	dra map[string]dradevice.Device
}

// findDevices is step 2 of ADD: resourceName -> device IDs. They are the
// caller's explicit device; else the devices of the config's
// "resourceClaim" (dra.go); else the pod's devices of the resource in
// kubelet order, the device plugin's and then the DRA drivers' (by the CDI
// rule, see pkg/cni/dradevice), and only when the kubelet reports none, the
// DRA devices the API server knows (a claim no container references is not
// in the kubelet's answer).
func (c *call) findDevices() (*candidates, *types.Error) {
	res, cerr := c.resourceName()
	if cerr != nil {
		return nil, cerr
	}
	if id := c.conf.DeviceIDFromConfig(); id != "" {
		return &candidates{resourceName: res, ids: []string{id}}, nil
	}
	if !c.pod.Known() {
		what := res + " devices"
		if c.conf.ResourceClaim != "" {
			what = "claim " + c.conf.ResourceClaim
		}
		return nil, cniError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS must carry K8S_POD_NAMESPACE and K8S_POD_NAME "+
			"so devplumb can find the pod's "+what, nil)
	}
	if c.conf.ResourceClaim != "" {
		return c.claimCandidates(res)
	}
	return c.kubeletCandidates(res)
}

// kubeletCandidates are the pod's devices of the resource, the kubelet's
// first, then the API server's DRA devices if the kubelet reports none.
func (c *call) kubeletCandidates(resourceName string) (*candidates, *types.Error) {
	pod, cerr := c.kubeletPod(resourceName)
	if cerr != nil {
		return nil, cerr
	}
	found := &candidates{resourceName: resourceName}
	for _, id := range podresources.DevicesOf(pod, resourceName) {
		if err := config.CheckDeviceID("kubelet device ID", id); err != nil {
			c.log.Warn("skipping device the kubelet reported", "err", err)
			continue
		}
		found.ids = append(found.ids, id)
	}
	refused := found.addDRA(dradevice.Local(pod, resourceName), c.log)
	if len(found.ids) == 0 {
		devs, cerr := c.apiDevices(resourceName, pod)
		if cerr != nil {
			return nil, cerr
		}
		refused = append(refused, found.addDRA(devs, c.log)...)
	}
	if len(found.ids) == 0 {
		return nil, c.noDevice(resourceName, pod, refused)
	}
	return found, nil
}

// kubeletPod is the kubelet's answer about this call's pod.
func (c *call) kubeletPod(resourceName string) (*v1.PodResources, *types.Error) {
	pr, cerr := c.kubelet.open()
	if cerr != nil {
		return nil, cerr
	}
	ctx, cancel := c.ctx()
	defer cancel()
	pod, err := pr.Get(ctx, c.pod.Namespace, c.pod.Name)
	if errors.Is(err, podresources.ErrPodNotFound) {
		return nil, cniError(ErrNoDevice, fmt.Sprintf("the kubelet knows no pod %s: check K8S_POD_NAMESPACE/K8S_POD_NAME "+
			"and that the pod requests %s", c.pod, resourceName), err)
	}
	if err != nil {
		return nil, cniError(ErrPodResources, "the kubelet PodResources API failed at "+c.conf.PodResourcesSocket, err)
	}
	return pod, nil
}

// noDevice says that the pod has no device of the resource, what the
// kubelet reported, and which DRA devices were refused and why.
func (c *call) noDevice(resourceName string, pod *v1.PodResources, refused []string) *types.Error {
	why := ""
	if len(refused) > 0 {
		why = "; refused: " + strings.Join(refused, "; ")
	}
	return cniError(ErrNoDevice, fmt.Sprintf("pod %s has no usable device of resource %s: request %s in the pod spec, "+
		"or claim a DRA device with attribute %s=%s (the kubelet returned %s%s)", c.pod, resourceName, resourceName,
		dradevice.AttrResourceName, resourceName, describe(pod), why), nil)
}

func (c *call) close() {
	if c.closeLog != nil {
		c.closeLog()
		c.closeLog = nil
	}
	c.kubelet.close()
}

// staleHolders asks the kubelet, before the node-wide state lock is taken
// (a slow kubelet must not make every ADD on the node queue behind this
// one), which other attachments' records holding the candidates are left
// over. It returns the check Take runs under the lock: the record is still
// the very one judged stale (same attachment, pod and device), as
// devplumbctl gc re-checks under the lock.
func (c *call) staleHolders(want *candidates) func(*attachment.Record) bool {
	if !c.kubelet.asked() {
		// No kubelet asked for the candidates (an explicit device): none
		// to ask about their holders either.
		return func(*attachment.Record) bool { return false }
	}
	recs, _ := c.records.List() // unreadable records are Take's to report
	stale := map[attachment.Key]*attachment.Record{}
	for _, a := range recs {
		if a.Key != c.key && a.ResourceName == want.resourceName && slices.Contains(want.ids, a.DeviceID) && c.heldStale(a) {
			stale[a.Key] = a
		}
	}
	return func(a *attachment.Record) bool {
		s := stale[a.Key]
		if s == nil || s.DeviceID != a.DeviceID || s.Pod != a.Pod || s.ResourceName != a.ResourceName {
			return false
		}
		c.log.Warn("taking over a stale device record: the kubelet no longer gives the device to its holder",
			"device", a.DeviceID, "holder", a.Pod.String(), "container", a.ContainerID)
		return true
	}
}

// heldStale reports whether another attachment's record of a device the
// kubelet gave this pod is left over: the kubelet no longer gives the
// device to the holder (its DEL never came, e.g. after a node crash), by
// leftover's rule. A holder of this pod's namespace and name but another
// UID is a pod deleted and created again: the kubelet's answer is about the
// new pod, so the old one's record is left over when its sandbox is gone.
func (c *call) heldStale(a *attachment.Record) bool {
	if !c.kubelet.asked() || !a.Pod.Known() || a.ResourceName == "" {
		return false
	}
	if a.Pod.Namespace == c.pod.Namespace && a.Pod.Name == c.pod.Name {
		return a.Pod.UID != "" && c.pod.UID != "" && a.Pod.UID != c.pod.UID && sandboxGone(a)
	}
	ctx, cancel := c.ctx()
	defer cancel()
	pod, err := c.kubelet.client.Get(ctx, a.Pod.Namespace, a.Pod.Name)
	if err != nil && !errors.Is(err, podresources.ErrPodNotFound) {
		return false // no answer: nothing to judge by
	}
	var devices []string
	if err == nil {
		devices = podresources.DevicesOf(pod, a.ResourceName)
	}
	return leftover.DeviceGone(a, err == nil, devices)
}

// sandboxGone reports whether an attachment's sandbox is gone: its netns
// no longer exists, or its ADD never got as far as recording one.
func sandboxGone(a *attachment.Record) bool {
	return leftover.NetnsGone(a.NetNS)
}

// checkKubelet confirms the kubelet still assigns a recorded device to the pod.
func (c *call) checkKubelet(a *attachment.Record) *types.Error {
	if a.ResourceName == "" || c.conf.DeviceIDFromConfig() != "" || !a.Pod.Known() || a.Claim != nil {
		// A DRA device's claim may be one the kubelet does not report.
		return nil
	}
	pr, cerr := c.kubelet.open()
	if cerr != nil {
		return cerr
	}
	ctx, cancel := c.ctx()
	defer cancel()
	devs, err := pr.Devices(ctx, a.Pod.Namespace, a.Pod.Name, a.ResourceName)
	if err != nil && !errors.Is(err, podresources.ErrPodNotFound) {
		return cniError(ErrPodResources, "the kubelet PodResources API failed at "+c.conf.PodResourcesSocket, err)
	}
	if !slices.Contains(devs, a.DeviceID) {
		return cniError(ErrNoDevice, fmt.Sprintf("the kubelet no longer assigns %s device %s to pod %s: recreate the pod",
			a.ResourceName, a.DeviceID, a.Pod), nil)
	}
	return nil
}

// describe says what the kubelet returned for a pod, for error messages.
func describe(p *v1.PodResources) string {
	var parts []string
	for _, ctr := range p.GetContainers() {
		for _, d := range ctr.GetDevices() {
			parts = append(parts, fmt.Sprintf("container %s: %s=%v", ctr.GetName(), d.GetResourceName(), d.GetDeviceIds()))
		}
		for _, dr := range ctr.GetDynamicResources() {
			for _, cr := range dr.GetClaimResources() {
				var cdi []string
				for _, d := range cr.GetCdiDevices() {
					cdi = append(cdi, d.GetName())
				}
				parts = append(parts, fmt.Sprintf("container %s: claim %s/%s device %s/%s/%s CDI %v", ctr.GetName(),
					dr.GetClaimNamespace(), dr.GetClaimName(), cr.GetDriverName(), cr.GetPoolName(), cr.GetDeviceName(), cdi))
			}
		}
	}
	if len(parts) == 0 {
		return "no devices at all"
	}
	return strings.Join(parts, "; ")
}
