package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/dradevice"
)

// DRAKube is what DRA needs from the API server besides Kube: reading the
// pod, its claims and the driver's slices (dradevice.API), and writing
// devplumb's part of a claim's status.devices[] entry. pkg/cni/kube's client
// has it; a Kube without it cannot serve "resourceClaim".
type DRAKube interface {
	Kube
	dradevice.API
	ApplyDeviceStatus(ctx context.Context, s dradevice.Status) error
	RemoveDeviceStatus(ctx context.Context, claim dradevice.Claim) error
}

// addDRA adds the DRA devices to the candidates, noting each in cs.dra. It
// says why it passed over the devices it refused.
func (cs *candidates) addDRA(devs []dradevice.Device, log *slog.Logger) (refused []string) {
	if cs.dra == nil {
		cs.dra = map[string]dradevice.Device{}
	}
	for _, d := range devs {
		// Both name files under deviceInfoDir: attributes are the driver's
		// (or a slice author's) input, checked as the kubelet's IDs are.
		err := config.CheckDeviceID("DRA device ID of "+d.Claim.String(), d.ID)
		if err == nil {
			err = config.CheckResourceName("resource name of "+d.Claim.String(), d.ResourceName)
		}
		if err != nil {
			log.Warn("skipping a DRA device", "err", err)
			refused = append(refused, err.Error())
			continue
		}
		if _, dup := cs.dra[d.ID]; dup || slices.Contains(cs.ids, d.ID) {
			continue
		}
		cs.dra[d.ID] = d
		cs.ids = append(cs.ids, d.ID)
	}
	return refused
}

// apiDevices asks the API server for the pod's DRA devices (the pod, its
// claims, the slices of their drivers on the node). local is the kubelet's
// answer, for the CDI rule; nil when it was not asked.
func (f *finder) apiDevices(res string, local *v1.PodResources) ([]dradevice.Device, *types.Error) {
	k, err := f.api.dra()
	if err != nil {
		return nil, cniError(ErrKube, "cannot build the Kubernetes client to read the pod's ResourceClaims", err)
	}
	if k == nil {
		return nil, nil
	}
	ctx, cancel := f.ctx()
	defer cancel()
	devs, err := dradevice.Resolve(ctx, k, dradevice.Query{Namespace: f.pod.Namespace, Pod: f.pod.Name, UID: f.pod.UID,
		PodClaim: f.conf.ResourceClaim, Request: f.conf.Request, ResourceName: res, Local: local})
	if errors.Is(err, dradevice.ErrNoDevice) {
		return nil, cniError(ErrNoDevice, err.Error(), nil)
	}
	if err != nil {
		return nil, cniError(ErrKube, "cannot read the pod's ResourceClaims: check kubeconfig "+f.conf.Kubeconfig+
			" and the RBAC of its user (get pods, resourceclaims; list resourceslices)", err)
	}
	return devs, nil
}

// claimCandidates are the devices of the config's "resourceClaim", and
// their resource: one resource, so that devplumb's records and the DP
// device-info file have one name to go by.
func (f *finder) claimCandidates(res string) (*candidates, *types.Error) {
	var local *v1.PodResources
	if _, cerr := f.kubelet.open(); cerr == nil {
		// Only for the CDI rule of a device without the deviceID attribute.
		ctx, cancel := f.ctx()
		local, _ = f.kubelet.get(ctx, f.pod.Namespace, f.pod.Name)
		cancel()
	}
	devs, cerr := f.apiDevices(res, local)
	if cerr != nil {
		return nil, cerr
	}
	if len(devs) == 0 {
		return nil, cniError(ErrNoDevice, fmt.Sprintf("claim %q of pod %s has no usable device", f.conf.ResourceClaim, f.pod), nil)
	}
	for _, d := range devs[1:] {
		if d.ResourceName != devs[0].ResourceName {
			return nil, cniError(ErrNoDevice, fmt.Sprintf("claim %q of pod %s has devices of resources %s and %s: "+
				"set \"request\" or \"resourceName\" to say which this network takes", f.conf.ResourceClaim, f.pod,
				devs[0].ResourceName, d.ResourceName), nil)
		}
	}
	found := &candidates{resourceName: devs[0].ResourceName}
	if refused := found.addDRA(devs, f.log); len(found.ids) == 0 {
		return nil, cniError(ErrNoDevice, fmt.Sprintf("claim %q of pod %s has no usable device: %s",
			f.conf.ResourceClaim, f.pod, strings.Join(refused, "; ")), nil)
	}
	return found, nil
}

// noteClaim notes in the record which ResourceClaim device it holds, if
// the device it took is a DRA device among the candidates.
func noteClaim(rec *attachment.Record, want *candidates) {
	if d, ok := want.dra[rec.DeviceID]; ok && d.ResourceName == rec.ResourceName {
		cl := d.Claim
		rec.Claim = &cl
	}
}

// cidrs are the entry's IPs in CIDR form, as the claim's networkData wants
// them, with the prefix lengths of the CNI result.
func cidrs(ips []string, result types.Result) []string {
	out := []string{}
	if result == nil {
		return out
	}
	r, err := current.NewResultFromResult(result)
	if err != nil {
		return out
	}
	for _, ip := range ips {
		for _, cfg := range r.IPs {
			if cfg.Address.IP.String() == ip {
				out = append(out, cfg.Address.String())
				break
			}
		}
	}
	return out
}

// recordedResult is the result a completed record keeps, for a repeated ADD.
func recordedResult(rec *attachment.Record) types.Result {
	r, err := create.CreateFromBytes(rec.Result)
	if err != nil {
		return nil
	}
	return r
}
