// Package nodestate gathers what one node holds for devplumb — the kubelet's
// device assignments, devplumb's attachment records and the device-info files —
// and points at what does not add up, for `devplumbctl inspect` and `gc`.
package nodestate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/leftover"
	"github.com/devplumb/devplumb/podresources"
)

// Paths says where a node keeps things; each has devplumb's default.
type Paths struct {
	PodResources  string `json:"podResources"`
	DeviceInfoDir string `json:"deviceInfoDir"`
	StateDir      string `json:"stateDir"`
}

// RootPaths is the layout under one directory that `--root` selects, the one
// nodesim and `make demo` use: ROOT/pod-resources/kubelet.sock, ROOT/devinfo,
// ROOT/devplumb.
func RootPaths(root string) Paths {
	return Paths{
		PodResources:  filepath.Join(root, "pod-resources", "kubelet.sock"),
		DeviceInfoDir: filepath.Join(root, "devinfo"),
		StateDir:      filepath.Join(root, "devplumb"),
	}
}

// Abs makes every path absolute: state records name absolute paths, and a
// relative --root must find the same files as an absolute one.
func (p Paths) Abs() (Paths, error) {
	for _, f := range []*string{&p.PodResources, &p.DeviceInfoDir, &p.StateDir} {
		abs, err := filepath.Abs(*f)
		if err != nil {
			return p, fmt.Errorf("path %q: %w", *f, err)
		}
		*f = abs
	}
	return p, nil
}

// View is a snapshot of a node.
type View struct {
	Paths Paths `json:"paths"`
	// Pods is nil when the kubelet could not be asked (PodResourcesError says why).
	Pods              []Pod        `json:"pods"`
	PodResourcesError string       `json:"podResourcesError,omitempty"`
	Attachments       []Attachment `json:"attachments"`
	Files             []File       `json:"files"`
	Problems          []string     `json:"problems"`
}

// Pod is one pod's devices as the kubelet reports them.
type Pod struct {
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	Devices   map[string][]string `json:"devices"` // resource name -> device IDs, kubelet order
}

// Attachment is one attachment record of devplumb's state.
type Attachment struct {
	Network      string `json:"network"`
	ContainerID  string `json:"containerID"`
	IfName       string `json:"ifName"`
	Pod          string `json:"pod"`
	ResourceName string `json:"resourceName,omitempty"`
	DeviceID     string `json:"deviceID"`
	CNIFile      string `json:"cniFile,omitempty"`
	// NoCNIFile: CNIFile does not exist (the device plugin described no
	// device, so ADD had nothing to copy).
	NoCNIFile     bool                 `json:"noCNIFile,omitempty"`
	Complete      bool                 `json:"complete"`
	NetworkStatus *nadv1.NetworkStatus `json:"networkStatus,omitempty"`
	// Phases: how long each step of the attachment's ADD took.
	Phases []attachment.Phase `json:"phases,omitempty"`
	// Claim: the DRA ResourceClaim device the attachment holds (nil for a device
	// plugin's), whose status.devices entry devplumb wrote.
	Claim *attachment.ClaimDevice `json:"claim,omitempty"`
	// Stale: the kubelet no longer gives this pod that device.
	Stale bool `json:"stale,omitempty"`
}

// File is one device-info file with its validation result.
type File struct {
	devinfo.File
	Error string `json:"error,omitempty"`
	Owned bool   `json:"claimed,omitempty"` // a CNI file some attachment names (the JSON key is the older word)
}

// Collect builds the view. An unreachable kubelet is recorded, not fatal:
// inspecting a node whose kubelet is down is when one needs it most.
func Collect(ctx context.Context, p Paths) (*View, error) {
	v := &View{Paths: p, Attachments: []Attachment{}, Files: []File{}, Problems: []string{}}
	v.collectPods(ctx)
	v.collectAttachments()
	if err := v.collectFiles(); err != nil {
		return nil, err
	}
	v.checkDevicesHeldOnce()
	return v, nil
}

func (v *View) collectPods(ctx context.Context) {
	pods, err := listPods(ctx, v.Paths.PodResources)
	if err != nil {
		v.PodResourcesError = err.Error()
		v.problem("kubelet PodResources: %v", err)
		return
	}
	v.Pods = pods
}

// listPods asks the kubelet for every pod's devices.
func listPods(ctx context.Context, socket string) ([]Pod, error) {
	c, err := podresources.New(socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	list, err := c.List(ctx)
	if err != nil {
		return nil, err
	}
	return podsOf(list), nil
}

func podsOf(list []*v1.PodResources) []Pod {
	pods := []Pod{}
	for _, pr := range list {
		pods = append(pods, Pod{Namespace: pr.GetNamespace(), Name: pr.GetName(), Devices: leftover.DevicesByResource(pr)})
	}
	sort.Slice(pods, func(i, j int) bool {
		return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name
	})
	return pods
}

func (v *View) collectAttachments() {
	// List returns the records it could read along with the errors of the rest.
	list, err := attachment.New(v.Paths.StateDir).List()
	if err != nil {
		v.problem("state %s: %v", v.Paths.StateDir, err)
	}
	for _, a := range list {
		att := Attachment{
			Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName,
			Pod: a.Pod.String(), ResourceName: a.ResourceName, DeviceID: a.DeviceID,
			CNIFile: a.CNIFile, Complete: a.Complete, NetworkStatus: a.NetworkStatus, Phases: a.Phases, Claim: a.Claim,
		}
		att.Stale = v.Pods != nil && stale(v.Pods, a)
		if a.CNIFile != "" {
			_, err := os.Lstat(a.CNIFile)
			att.NoCNIFile = errors.Is(err, fs.ErrNotExist)
		}
		if att.Stale {
			if a.Claim != nil {
				v.problem("attachment %s/%s/%s: pod %s is no longer on the node (device of %s)", a.Network, short(a.ContainerID), a.IfName, a.Pod, a.Claim)
			} else {
				v.problem("attachment %s/%s/%s: pod %s no longer has device %s of %s", a.Network, short(a.ContainerID), a.IfName, a.Pod, a.DeviceID, a.ResourceName)
			}
		}
		if !a.Complete {
			v.problem("attachment %s/%s/%s: ADD did not finish (in progress, or crashed)", a.Network, short(a.ContainerID), a.IfName)
		}
		v.Attachments = append(v.Attachments, att)
	}
}

// stale reports an attachment whose device the kubelet (its answer is pods)
// no longer assigns to its pod, by the rule the plugin also applies.
func stale(pods []Pod, a *attachment.Record) bool {
	i := slices.IndexFunc(pods, func(p Pod) bool { return p.Namespace == a.Pod.Namespace && p.Name == a.Pod.Name })
	if i < 0 {
		return leftover.DeviceGone(a, false, nil)
	}
	return leftover.DeviceGone(a, true, leftover.PodDevices(a, pods[i].Devices))
}

func (v *View) collectFiles() error {
	files, err := devinfo.NewStore(v.Paths.DeviceInfoDir).List()
	if err != nil {
		return err
	}
	owned := map[string]bool{}
	for _, a := range v.Attachments {
		owned[a.CNIFile] = true
	}
	for _, f := range files {
		vf := File{File: f, Owned: owned[f.Path]}
		info, err := devinfo.ReadFile(f.Path)
		if id, ok := devinfo.DeviceIDOfDPName(f.Name); err == nil && ok && f.Kind == devinfo.KindDP {
			err = devinfo.CheckFiledUnder(info, id)
		}
		if err != nil {
			vf.Error = err.Error()
			v.problem("%s: %v", f.Path, err)
		}
		if f.Kind == devinfo.KindCNI && !vf.Owned {
			v.problem("%s: no devplumb attachment owns this CNI device-info file (left by a crash, or written by another NPWG implementation)", f.Path)
		}
		v.Files = append(v.Files, vf)
	}
	return nil
}

// checkDevicesHeldOnce reports a device held by two attachments, which
// devplumb's records must never allow.
func (v *View) checkDevicesHeldOnce() {
	for i, a := range v.Attachments {
		for _, b := range v.Attachments[:i] {
			if a.DeviceID == b.DeviceID && attachment.SameResource(a.ResourceName, b.ResourceName) {
				v.problem("device %s of %s is held twice: %s/%s/%s and %s/%s/%s", a.DeviceID, cmp.Or(a.ResourceName, b.ResourceName),
					b.Network, short(b.ContainerID), b.IfName, a.Network, short(a.ContainerID), a.IfName)
			}
		}
	}
}

func (v *View) problem(format string, args ...any) {
	v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
