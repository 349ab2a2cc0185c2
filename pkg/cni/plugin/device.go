package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/delegate"
	"github.com/devplumb/devplumb/pkg/cni/dradevice"
	"github.com/devplumb/devplumb/pkg/cni/leftover"
	"github.com/devplumb/devplumb/podresources"
)

// finder finds the devices an attachment may take (step 2 of ADD), judges
// their other holders (for step 3), and checks at CHECK that the kubelet
// still gives the pod its device.
type finder struct {
	conf    *config.NetConf
	pod     attachment.Pod
	key     attachment.Key
	records *attachment.Store
	kubelet *kubeletClient
	api     *apiClient
	timeout time.Duration
	log     *slog.Logger
}

func (f *finder) ctx() (context.Context, context.CancelFunc) { return timeoutCtx(f.timeout) }

// noDeviceSource says what is missing. A config declaring the deviceID
// capability expects its caller (Multus) to pass the device; Multus passes
// one only for a pod that requests the resource its NAD's resourceName
// annotation names: that, not the config, is then what is missing.
func (f *finder) noDeviceSource() *types.Error {
	if f.conf.Capabilities[delegate.CapDeviceID] {
		return cniError(ErrNoDeviceSource, fmt.Sprintf("pod %s/%s has no device for network %q: the caller passed no runtimeConfig.deviceID; "+
			"Multus passes one only when the pod's containers request the resource the NetworkAttachmentDefinition's "+
			"k8s.v1.cni.cncf.io/resourceName annotation names: request that resource in the pod, or set \"resourceName\" "+
			"(for a pod whose device comes from a DRA ResourceClaim, which Multus does not pass: \"resourceName\" and \"kubeconfig\")",
			f.pod.Namespace, f.pod.Name, f.conf.Name), nil)
	}
	return cniError(ErrNoDeviceSource, `no device source: set "resourceName", pass the device as runtimeConfig.deviceID `+
		`(capability "deviceID") or "deviceID", or set "kubeconfig" so devplumb reads resourceName from the NetworkAttachmentDefinition`, nil)
}

// resourceName is the configured resourceName, else (with no explicit
// device) the one the NetworkAttachmentDefinition names.
func (f *finder) resourceName() (string, *types.Error) {
	if f.conf.ResourceName != "" || f.conf.ResourceClaim != "" || f.conf.DeviceIDFromConfig() != "" {
		return f.conf.ResourceName, nil
	}
	k, err := f.api.get()
	if err != nil {
		return "", cniError(ErrKube, "cannot build the Kubernetes client to read resourceName from the NetworkAttachmentDefinition", err)
	}
	if k == nil {
		return "", f.noDeviceSource()
	}
	ns, name := f.conf.NADRef(f.pod.Namespace)
	ctx, cancel := f.ctx()
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

// adoptDRAResource makes the candidates' resource that of their devices
// when all are DRA devices of one other resource: devices a DeviceClass
// serves for an extended resource named otherwise than their driver's
// resource (e.g. deviceclass.resource.kubernetes.io/<class>). Their DP
// device-info files and records go by the driver's name.
func (cs *candidates) adoptDRAResource() {
	res := ""
	for _, id := range cs.ids {
		d, ok := cs.dra[id]
		if !ok || (res != "" && d.ResourceName != res) {
			return
		}
		res = d.ResourceName
	}
	if res != "" {
		cs.resourceName = res
	}
}

// find is step 2 of ADD: resourceName -> device IDs. They are the
// caller's explicit device; else the devices of the config's
// "resourceClaim" (dra.go); else the pod's devices of the resource in
// kubelet order, the device plugin's and then the DRA drivers' (by the CDI
// rule, see pkg/cni/dradevice), and only when the kubelet reports none, the
// DRA devices the API server knows (a claim no container references is not
// in the kubelet's answer).
func (f *finder) find() (*candidates, *types.Error) {
	res, cerr := f.resourceName()
	if cerr != nil {
		return nil, cerr
	}
	if id := f.conf.DeviceIDFromConfig(); id != "" {
		if cerr := f.checkAssigned(id, res); cerr != nil {
			return nil, cerr
		}
		return &candidates{resourceName: res, ids: []string{id}}, nil
	}
	if !f.pod.Known() {
		what := res + " devices"
		if f.conf.ResourceClaim != "" {
			what = "claim " + f.conf.ResourceClaim
		}
		return nil, cniError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS must carry K8S_POD_NAMESPACE and K8S_POD_NAME "+
			"so devplumb can find the pod's "+what, nil)
	}
	if f.conf.ResourceClaim != "" {
		return f.claimCandidates(res)
	}
	return f.kubeletCandidates(res)
}

// kubeletCandidates are the pod's devices of the resource, the kubelet's
// first, then the API server's DRA devices if the kubelet reports none.
func (f *finder) kubeletCandidates(resourceName string) (*candidates, *types.Error) {
	pod, cerr := f.kubeletPod(resourceName)
	if cerr != nil {
		return nil, cerr
	}
	found := &candidates{resourceName: resourceName}
	for _, id := range podresources.DevicesOf(pod, resourceName) {
		if err := config.CheckDeviceID("kubelet device ID", id); err != nil {
			f.log.Warn("skipping device the kubelet reported", "err", err)
			continue
		}
		found.ids = append(found.ids, id)
	}
	refused := found.addDRA(dradevice.Local(pod, resourceName), f.log)
	if len(found.ids) == 0 {
		devs, cerr := f.apiDevices(resourceName, pod)
		if cerr != nil {
			return nil, cerr
		}
		refused = append(refused, found.addDRA(devs, f.log)...)
		found.adoptDRAResource()
	}
	if len(found.ids) == 0 {
		return nil, f.noDevice(resourceName, pod, refused)
	}
	return found, nil
}

// kubeletPod is the kubelet's answer about this call's pod.
func (f *finder) kubeletPod(resourceName string) (*v1.PodResources, *types.Error) {
	if _, cerr := f.kubelet.open(); cerr != nil {
		return nil, cerr
	}
	ctx, cancel := f.ctx()
	defer cancel()
	pod, err := f.kubelet.get(ctx, f.pod.Namespace, f.pod.Name)
	if errors.Is(err, podresources.ErrPodNotFound) {
		return nil, cniError(ErrNoDevice, fmt.Sprintf("the kubelet knows no pod %s: check K8S_POD_NAMESPACE/K8S_POD_NAME "+
			"and that the pod requests %s", f.pod, resourceName), err)
	}
	if err != nil {
		return nil, cniError(ErrPodResources, "the kubelet PodResources API failed at "+f.conf.PodResourcesSocket, err)
	}
	return pod, nil
}

// noDevice says that the pod has no device of the resource, what the
// kubelet reported, and which DRA devices were refused and why.
func (f *finder) noDevice(resourceName string, pod *v1.PodResources, refused []string) *types.Error {
	why := ""
	if len(refused) > 0 {
		why = "; refused: " + strings.Join(refused, "; ")
	}
	return cniError(ErrNoDevice, fmt.Sprintf("pod %s has no usable device of resource %s: request %s in the pod spec, "+
		"or claim a DRA device with attribute %s=%s (the kubelet returned %s%s)", f.pod, resourceName, resourceName,
		dradevice.AttrResourceName, resourceName, describe(pod), why), nil)
}

// staleHolders asks the kubelet, before the node-wide state lock is taken
// (a slow kubelet must not make every ADD on the node queue behind this
// one), which other attachments' records holding the candidates are left
// over. It returns the check Take runs under the lock: the record is still
// the very one judged stale (same attachment, pod and device), as
// devplumbctl gc re-checks under the lock.
func (f *finder) staleHolders(want *candidates) func(*attachment.Record) bool {
	if !f.kubelet.asked() {
		// No kubelet asked for the candidates (an explicit device): none
		// to ask about their holders either.
		return func(*attachment.Record) bool { return false }
	}
	recs, _ := f.records.List() // unreadable records are Take's to report
	stale := map[attachment.Key]*attachment.Record{}
	for _, a := range recs {
		if a.Key != f.key && attachment.SameResource(a.ResourceName, want.resourceName) && slices.Contains(want.ids, a.DeviceID) && f.heldStale(a) {
			stale[a.Key] = a
		}
	}
	return func(a *attachment.Record) bool {
		s := stale[a.Key]
		if s == nil || s.DeviceID != a.DeviceID || s.Pod != a.Pod || s.ResourceName != a.ResourceName {
			return false
		}
		f.warnTakeOver(a)
		return true
	}
}

// judgedLocally are Take's Stale and AskFirst before the kubelet is asked
// about any holder: a holder judged without the kubelet (localStale) is
// judged under the lock; another pod's holder is to be asked about first
// (staleHolders), which Take calls for only when it stands before every
// free candidate.
func (f *finder) judgedLocally() (stale, askFirst func(*attachment.Record) bool) {
	stale = func(a *attachment.Record) bool {
		s := !f.kubeletJudges(a) && f.localStale(a)
		if s {
			f.warnTakeOver(a)
		}
		return s
	}
	return stale, f.kubeletJudges
}

func (f *finder) warnTakeOver(a *attachment.Record) {
	f.log.Warn("taking over a stale device record: the kubelet no longer gives the device to its holder",
		"device", a.DeviceID, "holder", a.Pod.String(), "container", a.ContainerID)
}

// heldStale reports whether another attachment's record of a device the
// kubelet gave this pod is left over: the kubelet no longer gives the
// device to the holder (its DEL never came, e.g. after a node crash), by
// leftover's rule. A holder of this pod's namespace and name but another
// UID is a pod deleted and created again: the kubelet's answer is about the
// new pod, so the old one's record is left over when its sandbox is gone.
func (f *finder) heldStale(a *attachment.Record) bool {
	if !f.kubeletJudges(a) {
		return f.localStale(a)
	}
	ctx, cancel := f.ctx()
	defer cancel()
	pod, err := f.kubelet.client.Get(ctx, a.Pod.Namespace, a.Pod.Name)
	if err != nil && !errors.Is(err, podresources.ErrPodNotFound) {
		return false // no answer: nothing to judge by
	}
	var devices []string
	if err == nil {
		devices = leftover.PodDevices(a, leftover.DevicesByResource(pod))
	}
	return leftover.DeviceGone(a, err == nil, devices)
}

// kubeletJudges tells whether only the kubelet's answer about a holder's
// pod can judge it: a holder of another pod, once the kubelet was asked
// about this one. The others localStale judges.
func (f *finder) kubeletJudges(a *attachment.Record) bool {
	return f.kubelet.asked() && a.Pod.Known() && (a.Pod.Namespace != f.pod.Namespace || a.Pod.Name != f.pod.Name)
}

// localStale judges a holder the kubelet need not judge: not stale when no
// kubelet was asked (an explicit device) or its pod is unknown; a holder of
// this pod's namespace and name is stale when it is another pod of that
// name (UID) whose sandbox is gone.
func (f *finder) localStale(a *attachment.Record) bool {
	if !f.kubelet.asked() || !a.Pod.Known() {
		return false
	}
	return a.Pod.UID != "" && f.pod.UID != "" && a.Pod.UID != f.pod.UID && sandboxGone(a)
}

// sandboxGone reports whether an attachment's sandbox is gone: its netns
// no longer exists, or its ADD never got as far as recording one.
func sandboxGone(a *attachment.Record) bool {
	return leftover.NetnsGone(a.NetNS)
}

// checkKubelet confirms the kubelet still assigns a recorded device to the pod.
func (f *finder) checkKubelet(a *attachment.Record) *types.Error {
	if a.ResourceName == "" || f.conf.DeviceIDFromConfig() != "" || !a.Pod.Known() || a.Claim != nil {
		// A DRA device's claim may be one the kubelet does not report.
		return nil
	}
	pr, cerr := f.kubelet.open()
	if cerr != nil {
		return cerr
	}
	ctx, cancel := f.ctx()
	defer cancel()
	devs, err := pr.Devices(ctx, a.Pod.Namespace, a.Pod.Name, a.ResourceName)
	if err != nil && !errors.Is(err, podresources.ErrPodNotFound) {
		return cniError(ErrPodResources, "the kubelet PodResources API failed at "+f.conf.PodResourcesSocket, err)
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
