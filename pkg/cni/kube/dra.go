package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"

	"github.com/devplumb/devplumb/pkg/cni/dradevice"
)

// The DRA part of the client: the pod object (spec.resourceClaims and
// status.resourceClaimStatuses, which the metadata client does not carry), a
// ResourceClaim, the ResourceSlices of one driver on one node, and
// server-side apply of the claim's status.devices[] entries.
//
// These are client-go REST clients over a scheme of core/v1 and
// resource.k8s.io/v1 only. The typed clients (kubernetes/typed/..., and
// gentype they are made of) and the apply configurations
// (applyconfigurations/meta/v1 imports discovery) pull in
// kubernetes/scheme, which links and registers every API group: that
// doubled devplumb's binary (15 MB to 30 MB), and devplumb starts once per
// CNI call. The apply body is the typed k8s.io/api/resource/v1 object,
// whose optional fields are all omitempty: it carries only what is set.

type draClients struct {
	core, resource rest.Interface
	params         runtime.ParameterCodec
}

var draTypes = schemeOf(corev1.AddToScheme, resourcev1.AddToScheme)

// schemeOf is a scheme of the given API groups and its codecs, built once on
// first use: a CNI call that never writes them pays nothing.
func schemeOf(add ...func(*runtime.Scheme) error) func() (*runtime.Scheme, serializer.CodecFactory) {
	return sync.OnceValues(func() (*runtime.Scheme, serializer.CodecFactory) {
		s := runtime.NewScheme()
		for _, f := range add {
			utilruntime.Must(f(s))
		}
		return s, serializer.NewCodecFactory(s)
	})
}

// draClient makes the DRA clients on first use.
func (c *Client) draClient() (*draClients, error) {
	c.draMu.Lock()
	defer c.draMu.Unlock()
	if c.dra != nil {
		return c.dra, nil
	}
	scheme, codecs := draTypes()
	restFor := func(gv *schema.GroupVersion, apiPath string) (rest.Interface, error) {
		cfg := rest.CopyConfig(c.cfg)
		cfg.GroupVersion, cfg.APIPath = gv, apiPath
		cfg.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(scheme, codecs).WithoutConversion()
		return rest.RESTClientFor(cfg)
	}
	core, err := restFor(&corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, fmt.Errorf("kube: core/v1 client for %s: %w", c.host, err)
	}
	res, err := restFor(&resourcev1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("kube: resource.k8s.io/v1 client for %s: %w", c.host, err)
	}
	c.dra = &draClients{core: core, resource: res, params: runtime.NewParameterCodec(scheme)}
	return c.dra, nil
}

// do runs one request within the client's bound, retrying what retry retries.
func (c *Client) do(ctx context.Context, op func(context.Context, *draClients) error) error {
	d, err := c.draClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.retry(ctx, func(ctx context.Context) (bool, error) {
		err := op(ctx, d)
		return err == nil || !transient(err), err
	})
}

// Pod reads the pod object: from the cache, if it holds the pod of uid.
func (c *Client) Pod(ctx context.Context, namespace, name, uid string) (*corev1.Pod, error) {
	if c.cache != nil {
		if pod, ok := c.cache.AwaitPod(namespace, name, uid, ""); ok { // only an ADD reads the pod
			c.keepPod(pod)
			return pod, nil
		}
	}
	pod := &corev1.Pod{}
	err := c.do(ctx, func(ctx context.Context, d *draClients) error {
		return d.core.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(pod)
	})
	if err != nil {
		return nil, fmt.Errorf("kube: get pod %s/%s: %w", namespace, name, err)
	}
	c.keepPod(pod)
	return pod, nil
}

// ResourceClaim reads one ResourceClaim.
func (c *Client) ResourceClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	if c.cache != nil {
		if claim, ok := c.cache.ResourceClaim(namespace, name); ok {
			return claim, nil
		}
	}
	var claim *resourcev1.ResourceClaim
	err := c.do(ctx, func(ctx context.Context, d *draClients) (err error) {
		claim = &resourcev1.ResourceClaim{}
		return d.resource.Get().Namespace(namespace).Resource("resourceclaims").Name(name).Do(ctx).Into(claim)
	})
	if err != nil {
		return nil, fmt.Errorf("kube: get ResourceClaim %s/%s: %w", namespace, name, err)
	}
	return claim, nil
}

// ResourceSlices lists the ResourceSlices of driver on node: one request,
// both selected by the API server (spec.nodeName and spec.driver are
// field-selectable).
func (c *Client) ResourceSlices(ctx context.Context, node, driver string) ([]resourcev1.ResourceSlice, error) {
	if c.cache != nil {
		if list, ok := c.cache.ResourceSlices(node, driver); ok {
			return list, nil
		}
	}
	sel := fields.Set{resourcev1.ResourceSliceSelectorNodeName: node, resourcev1.ResourceSliceSelectorDriver: driver}
	list := &resourcev1.ResourceSliceList{}
	opts := &metav1.ListOptions{FieldSelector: sel.AsSelector().String()}
	err := c.do(ctx, func(ctx context.Context, d *draClients) error {
		return d.resource.Get().Resource("resourceslices").VersionedParams(opts, d.params).Do(ctx).Into(list)
	})
	if err != nil {
		return nil, fmt.Errorf("kube: list ResourceSlices of driver %s on node %s: %w", driver, node, err)
	}
	return list.Items, nil
}

// IsNotFound tells whether err says the object does not exist.
func (c *Client) IsNotFound(err error) bool { return apierrors.IsNotFound(err) }

var _ dradevice.API = (*Client)(nil)

// FieldManager is the server-side apply field manager of devplumb's part of
// one device's entry. It is one manager per device, not one for devplumb:
// an apply removes the fields its manager applied before and does not apply
// again, so with one manager every apply would have to carry all of
// devplumb's entries of the claim (two attachments of a pod with two
// devices of one claim, set up by two CNI calls at once, would each drop
// the other's). Per device, each call applies and removes exactly its own
// entry, with no coordination and nothing to read first.
func FieldManager(c dradevice.Claim) string {
	key := c.Driver + "/" + c.Pool + "/" + c.Device
	if c.ShareID != "" { // each share of a device has its own entry
		key += "/" + c.ShareID
	}
	m := "devplumb/" + key
	if len(m) <= 128 { // the API server's limit for a field manager
		return m
	}
	sum := sha256.Sum256([]byte(key))
	return "devplumb/" + hex.EncodeToString(sum[:16])
}

// ApplyDeviceStatus sets devplumb's part of the device's status.devices[]
// entry (networkData and a Ready condition) by server-side apply to
// resourceclaims/status: the driver's and other writers' fields and entries
// stay. Force takes over fields another manager set (a driver's own
// networkData): devplumb knows the interface the pod got.
func (c *Client) ApplyDeviceStatus(ctx context.Context, s dradevice.Status) error {
	msg := fmt.Sprintf("devplumb attached the device as interface %s", s.InterfaceName)
	if s.Network != "" {
		msg += " of network " + s.Network
	}
	entry := resourcev1.AllocatedDeviceStatus{
		Driver: s.Driver, Pool: s.Pool, Device: s.Device,
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "NetworkReady",
			Message: msg, LastTransitionTime: metav1.NewTime(time.Now())}},
		NetworkData: &resourcev1.NetworkDeviceData{InterfaceName: s.InterfaceName, IPs: s.IPs, HardwareAddress: s.HardwareAddress},
	}
	if s.ShareID != "" {
		entry.ShareID = &s.ShareID
	}
	obj := applyObject(s.Claim)
	obj.Status.Devices = []resourcev1.AllocatedDeviceStatus{entry}
	if err := c.applyStatus(ctx, s.Claim, obj); err != nil {
		return fmt.Errorf("kube: apply status of %s: %w", s.Claim, err)
	}
	return nil
}

// RemoveDeviceStatus removes devplumb's part of the device's entry: an apply
// of nothing by the device's field manager drops exactly the fields it
// applied (the entry goes when no one else has fields in it). A claim that
// is gone is not an error.
func (c *Client) RemoveDeviceStatus(ctx context.Context, claim dradevice.Claim) error {
	err := c.applyStatus(ctx, claim, applyObject(claim))
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		c.log.Debug("claim status: claim gone, nothing to remove", "claim", claim.Namespace+"/"+claim.Name)
		return nil
	default:
		return fmt.Errorf("kube: remove devplumb's status of %s: %w", claim, err)
	}
}

// applyObject is an apply configuration of the claim with nothing set.
func applyObject(claim dradevice.Claim) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: claim.Namespace, Name: claim.Name},
	}
}

func (c *Client) applyStatus(ctx context.Context, claim dradevice.Claim, obj *resourcev1.ResourceClaim) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encode apply configuration: %w", err)
	}
	force := true
	opts := &metav1.PatchOptions{FieldManager: FieldManager(claim), Force: &force}
	err = c.do(ctx, func(ctx context.Context, d *draClients) error {
		return d.resource.Patch(types.ApplyPatchType).Namespace(claim.Namespace).Resource("resourceclaims").
			Name(claim.Name).SubResource("status").VersionedParams(opts, d.params).Body(body).Do(ctx).Error()
	})
	return claimStatusDenied(err, claim)
}

// NewForConfig is New for a rest.Config already loaded (tests count its
// requests through cfg.WrapTransport).
func NewForConfig(cfg *rest.Config, timeout time.Duration, log *slog.Logger) (*Client, error) {
	if timeout <= 0 {
		return nil, fmt.Errorf("kube: timeout %v: must be positive", timeout)
	}
	if log == nil {
		log = slog.Default()
	}
	return newFromConfig(cfg, timeout, log)
}
