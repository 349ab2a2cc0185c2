// Package attachment records which device each attachment of a pod holds.
//
// One JSON record per attachment (network, container ID, interface) lives in
// <stateDir>/attachments; every read-modify-write happens under an exclusive
// flock on <stateDir>/lock, so concurrent ADDs of many pods never hand out one
// device twice. The record also caches what DEL needs (the delegate config and
// runtime arguments used at ADD) and the network-status entry.
package attachment

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/devplumb/devplumb/pkg/base/safefile"
)

// Key identifies one attachment.
type Key struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

// Pod identifies the pod an attachment belongs to (from CNI_ARGS).
type Pod struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

// Known reports whether the runtime told us which pod this is.
func (p Pod) Known() bool { return p.Namespace != "" && p.Name != "" }

func (p Pod) String() string {
	if !p.Known() {
		return "(pod unknown: no K8S_POD_NAMESPACE/K8S_POD_NAME in CNI_ARGS)"
	}
	return p.Namespace + "/" + p.Name
}

// Record is the state kept for one attachment: which device it holds.
type Record struct {
	// Version is the record's format (FormatVersion when this devplumb wrote
	// it, 0 from devplumbs before the field): see Newer.
	Version int `json:"version"`
	Key
	Pod          Pod    `json:"pod"`
	ResourceName string `json:"resourceName,omitempty"`
	DeviceID     string `json:"deviceID"`
	// Claim is the DRA device the device ID came from (nil for a device
	// plugin's device): DEL and GC remove devplumb's part of the claim's
	// status with it, without reading the pod or the claim again.
	Claim *ClaimDevice `json:"claim,omitempty"`
	// CNIFile is the CNI device-info file of this attachment.
	CNIFile string `json:"cniFile,omitempty"`
	// Delegate is the delegate conflist as run at ADD, so DEL runs the same.
	Delegate       json.RawMessage `json:"delegate,omitempty"`
	NetNS          string          `json:"netns,omitempty"`
	CNIArgs        [][2]string     `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]any  `json:"capabilityArgs,omitempty"`
	// CNIPath is the CNI_PATH the ADD found its delegates in, so that
	// devplumbctl gc runs their DEL from there (records of older devplumbs
	// have none: gc then looks in its --cni-path or /opt/cni/bin).
	CNIPath string `json:"cniPath,omitempty"`
	// Complete is set when ADD finished; an incomplete record is an ADD in
	// progress or one that crashed half way (GC and DEL clean it), or a DEL
	// that undid the delegates and was killed before removing the record.
	Complete      bool                 `json:"complete"`
	Result        json.RawMessage      `json:"result,omitempty"`
	NetworkStatus *nadv1.NetworkStatus `json:"networkStatus,omitempty"`
	// Phases is how long each step of the ADD that completed this record took.
	Phases []Phase `json:"phases,omitempty"`

	file string // where it was read from, for errors; "" for a new record
	// headerOnly: only recordHeader's fields were read (Take's sorting);
	// full reads the rest before the record leaves Take.
	headerOnly bool
}

// ClaimDevice names one allocated device of one ResourceClaim: the claim,
// and the key of its status.devices[] entry (driver, pool, device).
type ClaimDevice struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Driver    string `json:"driver"`
	Pool      string `json:"pool"`
	Device    string `json:"device"`
	// Request is the claim's request the device was allocated for, when known.
	Request string `json:"request,omitempty"`
	// ShareID is the allocation's share of a device many claims share
	// (KEP-5075), part of the status entry's key; Bandwidth is what the
	// share consumed, in bit/s, the rate devplumb shapes it to.
	ShareID   string `json:"shareID,omitempty"`
	Bandwidth int64  `json:"bandwidth,omitempty"`
}

func (c ClaimDevice) String() string {
	s := fmt.Sprintf("ResourceClaim %s/%s device %s/%s/%s", c.Namespace, c.Name, c.Driver, c.Pool, c.Device)
	if c.ShareID != "" {
		s += " share " + c.ShareID
	}
	return s
}

// Phase is one timed step of a CNI call (what `make bench` and inspect show).
type Phase struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"ns"`
}

// Store is the attachment records below one state directory. A Store
// serves one CNI call (or one gc run): it checks its directories once, on
// first use, not before every read and write (each check stats every
// directory from the root, about fifteen calls). A directory that passed
// stays as checked until root changes it, and whoever can write the state
// directory can forge its records anyway; a new call checks afresh.
type Store struct {
	Dir string

	mu        sync.Mutex
	root      *safefile.Root // Dir, once it passed its check
	recordsOK atomic.Bool    // Dir/attachments exists and passed its check
}

// New returns the store under dir (created on first write).
func New(dir string) *Store { return &Store{Dir: dir} }

// ErrNoFreeDevice is returned when other attachments hold every candidate device.
var ErrNoFreeDevice = errors.New("no free device")

// ErrAskFirst is returned, with nothing taken or written, when a candidate
// comes before any free one and its holder is one Request.AskFirst says
// the caller must judge first (by asking the kubelet, outside the lock).
var ErrAskFirst = errors.New("a holder of a candidate device must be judged first")

// Request asks for a device for one attachment.
type Request struct {
	Key
	Pod          Pod
	ResourceName string
	// Candidates are the devices this attachment may take, in preference
	// order (the kubelet's order, or the one device the caller named).
	Candidates []string
	// Stale, when set, is asked (under the lock) about another pod's record
	// holding a candidate; true drops that record. The kubelet gave the device to
	// this pod, so a holder the kubelet no longer knows missed its DEL. It
	// runs under the node-wide lock, so it must not block: the caller asks
	// the kubelet first and Stale only checks the answer still applies.
	Stale func(*Record) bool
	// AskFirst, when set, tells whether a holder Stale does not call stale
	// may be stale all the same, for an answer the caller has not asked
	// yet. Met before any free candidate, such a holder ends Take with
	// ErrAskFirst: the caller asks and takes again. A free candidate ahead
	// of it is taken without asking, the same device Take takes with every
	// answer at hand: so an ADD whose device is free reads the records once.
	AskFirst func(*Record) bool
	// SandboxGone, when set, tells (under the lock, without blocking)
	// whether the sandbox of a record of this pod under another container
	// ID is gone; only then does this attachment take over its devices.
	// Unset, none is taken over.
	SandboxGone func(*Record) bool
	// Fill, when set, completes a new record (its device picked) before its
	// first write, under the lock: a fresh ADD records its device and the
	// run to come in one write. An error takes nothing and is Take's. A
	// record the attachment holds already is returned as it is.
	Fill func(*Record) error
}

// Taken is the outcome of Take.
type Taken struct {
	Record *Record
	// Dropped are records of older sandboxes of the same pod that Take
	// removed; the caller cleans their CNI files.
	Dropped []*Record
	// Unreadable reports corrupt records Take passed over (for the log):
	// one bad file must not stop every ADD on the node.
	Unreadable error
}

// Take picks a device for the attachment under the lock and records it.
// A retried ADD of the same attachment gets the device it already holds.
// On error, a non-nil Taken still lists the records it dropped.
func (s *Store) Take(req Request) (*Taken, error) {
	var out *Taken
	err := s.Locked(func() error {
		var err error
		out, err = s.takeLocked(req)
		return err
	})
	return out, err
}

func (s *Store) takeLocked(req Request) (*Taken, error) {
	all, unreadable, err := s.listWith(readHeader)
	if err != nil {
		return nil, err
	}
	out := &Taken{Unreadable: unreadable}
	own, held, err := s.partition(req, all, out)
	if err != nil {
		return out, err
	}
	if err := own.Newer(); err != nil {
		// A retried ADD must not rewrite or drop what a newer devplumb set up.
		return out, fmt.Errorf("ADD of attachment %s/%s/%s: %w", req.Network, req.ContainerID, req.IfName, err)
	}
	if own != nil {
		if own, err = full(own); err != nil {
			return out, err
		}
	}
	if own != nil && slices.Contains(req.Candidates, own.DeviceID) && own.ResourceName == req.ResourceName {
		out.Record = own
		return out, nil
	}
	if err := s.pick(req, held, out); err != nil {
		// The older sandboxes' records are gone even so: the caller undoes them.
		return out, err
	}
	if own != nil {
		// The same attachment asked for another device: what its old
		// record set up is the caller's to undo.
		out.Dropped = append(out.Dropped, own)
	}
	return out, nil
}

// partition sorts the records: the attachment's own, the records of older
// sandboxes of the pod (removed, into out.Dropped), and the devices of the
// resource other attachments hold (see SameResource).
func (s *Store) partition(req Request, all []*Record, out *Taken) (*Record, map[string]*Record, error) {
	var own *Record
	held := map[string]*Record{}
	for _, a := range all {
		switch {
		case a.Key == req.Key:
			own = a
		case olderSandbox(a, req):
			if err := a.Newer(); err != nil {
				// Its delegates are the newer devplumb's to undo: not taken over.
				return nil, nil, fmt.Errorf("take over the older sandbox's attachment: %w", err)
			}
			if err := s.drop(a, out); err != nil {
				return nil, nil, err
			}
		case SameResource(a.ResourceName, req.ResourceName):
			held[a.DeviceID] = a
		}
	}
	return own, held, nil
}

// drop removes a record Take takes over and hands the whole of it to the
// caller, who undoes what it set up.
func (s *Store) drop(a *Record, out *Taken) error {
	whole, err := full(a)
	if err != nil {
		return err
	}
	if err := s.Remove(a.Key); err != nil {
		return err
	}
	out.Dropped = append(out.Dropped, whole)
	return nil
}

// pick records the first candidate no one holds, taking over a holder that
// req.Stale calls stale, into out.Attachment.
func (s *Store) pick(req Request, held map[string]*Record, out *Taken) error {
	var refused []error
	for _, dev := range req.Candidates {
		if a := held[dev]; a != nil && req.Stale != nil && req.Stale(a) {
			if err := a.Newer(); err != nil {
				// A newer devplumb's record stays, stale or not: another
				// candidate may still be free.
				refused = append(refused, fmt.Errorf("device %s not taken over: %w", dev, err))
				continue
			}
			if err := s.drop(a, out); err != nil {
				return err
			}
			delete(held, dev)
		}
		if a := held[dev]; a != nil {
			if req.AskFirst != nil && req.AskFirst(a) {
				return ErrAskFirst
			}
			continue
		}
		a := &Record{Key: req.Key, Pod: req.Pod, ResourceName: req.ResourceName, DeviceID: dev}
		if req.Fill != nil {
			if err := req.Fill(a); err != nil {
				return err
			}
		}
		if err := s.Put(a); err != nil {
			return err
		}
		out.Record = a
		return nil
	}
	return errors.Join(append([]error{noFreeError(req, held)}, refused...)...)
}

// SameResource tells whether device IDs recorded under resource a and asked
// for under resource b name the same devices. Within one resource an ID is one
// device (the kubelet's rule). A device injected by the caller (Multus's
// runtimeConfig.deviceID, a top-level "deviceID") is recorded under no resource:
// it is the same device as a resource's device of that ID, so a pod attached to
// a network with an injected device and one with resourceName never gets one
// device twice. Two named resources may reuse an ID (socket file names) for
// different devices.
func SameResource(a, b string) bool {
	return a == b || a == "" || b == ""
}

// olderSandbox: a record of the same pod (namespace, name and UID: a pod
// recreated under the same name is another pod) under another container ID
// whose sandbox is gone belongs to a sandbox the runtime replaced; its
// device is this pod's again. A sandbox still there keeps its devices until
// its DEL.
func olderSandbox(a *Record, req Request) bool {
	return req.Pod.Known() && a.Pod.Namespace == req.Pod.Namespace && a.Pod.Name == req.Pod.Name &&
		req.Pod.UID != "" && a.Pod.UID == req.Pod.UID && a.ContainerID != req.ContainerID &&
		req.SandboxGone != nil && req.SandboxGone(a)
}

func noFreeError(req Request, held map[string]*Record) error {
	var holders []string
	for _, dev := range req.Candidates {
		a := held[dev]
		holders = append(holders, fmt.Sprintf("%s held by pod %s (container %s, interface %s, network %s)",
			dev, a.Pod, a.ContainerID, a.IfName, a.Network))
	}
	res := req.ResourceName
	if res == "" {
		res = "(explicit deviceID)"
	}
	return fmt.Errorf("%w for pod %s, resource %s: %s; give the pod one more device of the resource, or DEL/GC stale attachments",
		ErrNoFreeDevice, req.Pod, res, strings.Join(holders, "; "))
}

// Release removes the record of k under the lock; a missing one is fine.
// A newer devplumb's record is refused (ErrNewerFormat) and stays: callers
// that must not fail (DEL) check Newer first and leave it alone.
func (s *Store) Release(k Key) error {
	return s.Locked(func() error { return s.release(k) })
}

// release is Release under the lock.
func (s *Store) release(k Key) error {
	cur, err := s.getHeader(k)
	if errors.Is(err, ErrNewerFormat) {
		return fmt.Errorf("release attachment %s/%s/%s: %w", k.Network, k.ContainerID, k.IfName, err)
	}
	if err := cur.Newer(); err != nil {
		return fmt.Errorf("release attachment %s/%s/%s: %w", k.Network, k.ContainerID, k.IfName, err)
	}
	return s.Remove(k)
}

// Retire is the end of attachment k's DEL, after its delegates' DEL, under one
// hold of the lock (DEL's three steps took it twice and read the record twice).
// First undone, when not nil, is rewritten as Update does: the record says
// the delegates are undone, so that a DEL killed after it and run again does
// not run them a second time; a failure to write it goes to undoneErr and the
// DEL goes on. Then removeFiles removes what the record names, which must go
// while a record still names it, and last the record goes as Release removes
// it: an error of removeFiles keeps the record.
func (s *Store) Retire(k Key, undone *Record, undoneErr func(error), removeFiles func() error) error {
	return s.Locked(func() error {
		written := false
		if undone != nil {
			err := s.update(undone)
			if written = err == nil; !written {
				undoneErr(err)
			}
		}
		if err := removeFiles(); err != nil {
			return err
		}
		if written { // the record is the one just written under this lock: ours, of this format
			return s.Remove(k)
		}
		return s.release(k)
	})
}

// ReleaseHeld removes a's record only while it still holds a's device, so a
// failed ADD rolling back never frees a device someone else took since.
func (s *Store) ReleaseHeld(a *Record) error {
	return s.Locked(func() error {
		cur, err := s.getHeader(a.Key)
		if errors.Is(err, ErrNewerFormat) || cur.Newer() != nil {
			return nil // a newer devplumb's since: not ours to remove
		}
		if err == nil && (cur == nil || cur.DeviceID != a.DeviceID || cur.ResourceName != a.ResourceName) {
			return nil
		}
		return s.Remove(a.Key) // ours, or corrupt: either way not another's live record
	})
}

// ErrDeviceLost is returned by Update when the record it would rewrite is
// gone or holds another device: a newer sandbox of the pod, or a takeover of
// a stale record, took the device while this ADD ran.
var ErrDeviceLost = errors.New("the device was taken over")

// Update rewrites a record under the lock, only while the attachment still
// holds the device it took: writing it back unconditionally would
// resurrect a dropped record and hand one device out twice.
func (s *Store) Update(a *Record) error {
	return s.Locked(func() error { return s.update(a) })
}

// update is Update under the lock.
func (s *Store) update(a *Record) error {
	cur, err := s.getHeader(a.Key)
	if err != nil {
		return err
	}
	if err := cur.Newer(); err != nil {
		return fmt.Errorf("update attachment %s/%s/%s: %w", a.Network, a.ContainerID, a.IfName, err)
	}
	if cur == nil || cur.DeviceID != a.DeviceID || cur.ResourceName != a.ResourceName {
		return fmt.Errorf("%w: attachment %s/%s/%s no longer holds device %s; run ADD again",
			ErrDeviceLost, a.Network, a.ContainerID, a.IfName, a.DeviceID)
	}
	return s.Put(a)
}
