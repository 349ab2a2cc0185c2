// Package claims records which device each attachment of a pod holds.
//
// One JSON record per attachment (network, container ID, interface) lives in
// <stateDir>/attachments; every read-modify-write happens under an exclusive
// flock on <stateDir>/lock, so concurrent ADDs of many pods never hand out one
// device twice. The record also caches what DEL needs (the delegate config and
// runtime arguments used at ADD) and the network-status entry.
package claims

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"golang.org/x/sys/unix"

	"github.com/devplumb/devplumb/pkg/atomicfile"
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

// Attachment is the state kept for one attachment.
type Attachment struct {
	Key
	Pod          Pod    `json:"pod"`
	ResourceName string `json:"resourceName,omitempty"`
	DeviceID     string `json:"deviceID"`
	// CNIFile is the CNI device-info file of this attachment.
	CNIFile string `json:"cniFile,omitempty"`
	// Delegate is the delegate conflist as run at ADD, so DEL runs the same.
	Delegate       json.RawMessage `json:"delegate,omitempty"`
	NetNS          string          `json:"netns,omitempty"`
	CNIArgs        [][2]string     `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]any  `json:"capabilityArgs,omitempty"`
	// Complete is set when ADD finished; an incomplete record is an ADD in
	// progress or one that crashed half way (GC and DEL clean it).
	Complete      bool                 `json:"complete"`
	Result        json.RawMessage      `json:"result,omitempty"`
	NetworkStatus *nadv1.NetworkStatus `json:"networkStatus,omitempty"`
}

// Store is the claim state below one state directory.
type Store struct{ Dir string }

// New returns the store under dir (created on first write).
func New(dir string) *Store { return &Store{Dir: dir} }

// ErrNoFreeDevice is returned when every candidate device is claimed.
var ErrNoFreeDevice = errors.New("no free device")

func (s *Store) attachDir() string { return filepath.Join(s.Dir, "attachments") }

// path of the record of k. Each part must pass the CNI specification's own
// check (skel applies it; this keeps a direct caller inside the dir), and
// ':', which none of them may contain, separates them, so two different
// attachments never share a file ("a-b","c" and "a","b-c" would with '-').
func (s *Store) path(k Key) (string, error) {
	checks := []struct {
		what, val string
		check     func(string) *types.Error
	}{
		{"network name", k.Network, utils.ValidateNetworkName},
		{"container ID", k.ContainerID, utils.ValidateContainerID},
		{"interface name", k.IfName, utils.ValidateInterfaceName},
	}
	for _, c := range checks {
		if err := c.check(c.val); err != nil {
			return "", fmt.Errorf("attachment %q/%q/%q: %s %q cannot be part of a state file name: %s",
				k.Network, k.ContainerID, k.IfName, c.what, c.val, err.Msg)
		}
	}
	name := k.Network + ":" + k.ContainerID + ":" + k.IfName + ".json"
	if len(name) > 255 {
		return "", fmt.Errorf("attachment %s/%s/%s: state file name is longer than 255 bytes", k.Network, k.ContainerID, k.IfName)
	}
	return filepath.Join(s.attachDir(), name), nil
}

// Locked runs fn while holding the store's exclusive lock.
func (s *Store) Locked(fn func() error) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("open state lock: %w", err)
	}
	defer f.Close()
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lock state dir %s: %w", s.Dir, err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN) //nolint:errcheck // closing the file unlocks too
	return fn()
}

// Get returns the record of k, or nil when there is none. Callers that
// modify state hold the lock.
func (s *Store) Get(k Key) (*Attachment, error) {
	p, err := s.path(k)
	if err != nil {
		return nil, err
	}
	return readRecord(p)
}

func readRecord(p string) (*Attachment, error) {
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w", p, err)
	}
	a := &Attachment{}
	if err := json.Unmarshal(data, a); err != nil {
		return nil, fmt.Errorf("state file %s is corrupt (%v): remove it and run DEL again", p, err)
	}
	return a, nil
}

// Put writes a record atomically.
func (s *Store) Put(a *Attachment) error {
	p, err := s.path(a.Key)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := atomicfile.WriteFile(p, data, 0o600); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// Remove deletes the record of k; a missing record is fine.
func (s *Store) Remove(k Key) error {
	p, err := s.path(k)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove state: %w", err)
	}
	return nil
}

// List returns all records, sorted by file name. Corrupt records are
// skipped and reported in the error, so one bad file does not block GC.
func (s *Store) List() ([]*Attachment, error) {
	out, corrupt, err := s.list()
	if err != nil {
		return nil, err
	}
	return out, corrupt
}

// list returns the readable records, the errors of corrupt ones apart, and
// err when the directory itself cannot be read.
func (s *Store) list() (out []*Attachment, corrupt, err error) {
	entries, err := os.ReadDir(s.attachDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list state: %w", err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var errs []error
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		a, err := readRecord(filepath.Join(s.attachDir(), e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if a != nil {
			out = append(out, a)
		}
	}
	return out, errors.Join(errs...), nil
}

// keyOf parses a record's file name back into its key: the names are
// unambiguous, so even a record too corrupt to read can be told apart.
func keyOf(name string) (Key, bool) {
	base, ok := strings.CutSuffix(name, ".json")
	parts := strings.Split(base, ":")
	if !ok || len(parts) != 3 {
		return Key{}, false
	}
	return Key{Network: parts[0], ContainerID: parts[1], IfName: parts[2]}, true
}

// RemoveCorrupt removes, under the lock, the unreadable records of network
// that keep does not want, and returns their keys, so GC clears them too.
func (s *Store) RemoveCorrupt(network string, keep func(Key) bool) ([]Key, error) {
	var removed []Key
	err := s.Locked(func() error {
		entries, err := os.ReadDir(s.attachDir())
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list state: %w", err)
		}
		for _, e := range entries {
			k, ok := keyOf(e.Name())
			if !ok || k.Network != network || keep(k) {
				continue
			}
			gone, err := s.removeIfCorrupt(k)
			if err != nil {
				return err
			}
			if gone {
				removed = append(removed, k)
			}
		}
		return nil
	})
	return removed, err
}

// removeIfCorrupt removes k's record when it cannot be read.
func (s *Store) removeIfCorrupt(k Key) (bool, error) {
	p, err := s.path(k)
	if err != nil {
		return false, nil // not a name devplumb writes
	}
	if _, err := readRecord(p); err == nil {
		return false, nil // readable, or gone: List's business
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("remove state: %w", err)
	}
	return true, nil
}

// Request asks for a device for one attachment.
type Request struct {
	Key
	Pod          Pod
	ResourceName string
	// Candidates are the devices this attachment may take, in preference
	// order (the kubelet's order, or the one device the caller named).
	Candidates []string
	// Stale, when set, is asked (under the lock) about another pod's claim
	// on a candidate; true drops that claim. The kubelet gave the device to
	// this pod, so a holder the kubelet no longer knows missed its DEL.
	Stale func(*Attachment) bool
}

// Claimed is the outcome of Claim.
type Claimed struct {
	Attachment *Attachment
	// Dropped are records of older sandboxes of the same pod that Claim
	// removed; the caller cleans their CNI files.
	Dropped []*Attachment
	// Unreadable reports corrupt records Claim passed over (for the log):
	// one bad file must not stop every ADD on the node.
	Unreadable error
}

// Claim picks a device for the attachment under the lock and records it.
// A retried ADD of the same attachment gets the device it already holds.
// On error, a non-nil Claimed still lists the claims it dropped.
func (s *Store) Claim(req Request) (*Claimed, error) {
	var out *Claimed
	err := s.Locked(func() error {
		var err error
		out, err = s.claimLocked(req)
		return err
	})
	return out, err
}

func (s *Store) claimLocked(req Request) (*Claimed, error) {
	all, unreadable, err := s.list()
	if err != nil {
		return nil, err
	}
	out := &Claimed{Unreadable: unreadable}
	held := map[string]*Attachment{}
	var replaced *Attachment
	for _, a := range all {
		switch {
		case a.Key == req.Key:
			if slices.Contains(req.Candidates, a.DeviceID) && a.ResourceName == req.ResourceName {
				out.Attachment = a
				return out, nil
			}
			// The same attachment asks for a different device now: its
			// old claim is stale, and what it set up is undone once the
			// new claim replaces it.
			replaced = a
		case olderSandbox(a, req):
			if err := s.Remove(a.Key); err != nil {
				return nil, err
			}
			out.Dropped = append(out.Dropped, a)
		case a.ResourceName == req.ResourceName:
			held[a.DeviceID] = a
		}
	}
	for _, dev := range req.Candidates {
		if a := held[dev]; a != nil && req.Stale != nil && req.Stale(a) {
			if err := s.Remove(a.Key); err != nil {
				return nil, err
			}
			out.Dropped = append(out.Dropped, a)
			delete(held, dev)
		}
		if held[dev] != nil {
			continue
		}
		a := &Attachment{Key: req.Key, Pod: req.Pod, ResourceName: req.ResourceName, DeviceID: dev}
		if err := s.Put(a); err != nil {
			return out, err
		}
		if replaced != nil {
			out.Dropped = append(out.Dropped, replaced)
		}
		out.Attachment = a
		return out, nil
	}
	// The older sandboxes' claims are gone even so: the caller undoes them.
	return out, noFreeError(req, held)
}

// olderSandbox: a record of the same pod under another container ID belongs
// to a sandbox the runtime replaced; its device is this pod's again.
func olderSandbox(a *Attachment, req Request) bool {
	return req.Pod.Known() && a.Pod.Namespace == req.Pod.Namespace && a.Pod.Name == req.Pod.Name &&
		a.ContainerID != req.ContainerID
}

func noFreeError(req Request, held map[string]*Attachment) error {
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
func (s *Store) Release(k Key) error {
	return s.Locked(func() error { return s.Remove(k) })
}

// ReleaseHeld removes a's record only while it still holds a's device, so a
// failed ADD rolling back never frees a claim someone else made since.
func (s *Store) ReleaseHeld(a *Attachment) error {
	return s.Locked(func() error {
		cur, err := s.Get(a.Key)
		if err == nil && (cur == nil || cur.DeviceID != a.DeviceID || cur.ResourceName != a.ResourceName) {
			return nil
		}
		return s.Remove(a.Key) // ours, or corrupt: either way not a live claim of another
	})
}

// ErrClaimLost is returned by Update when the record it would rewrite is
// gone or holds another device: a newer sandbox of the pod, or a takeover of
// a stale claim, took the device while this ADD ran.
var ErrClaimLost = errors.New("the device claim was taken over")

// Update rewrites a record under the lock, only while the attachment still
// holds the device it claimed: writing it back unconditionally would
// resurrect a dropped claim and hand one device out twice.
func (s *Store) Update(a *Attachment) error {
	return s.Locked(func() error {
		cur, err := s.Get(a.Key)
		if err != nil {
			return err
		}
		if cur == nil || cur.DeviceID != a.DeviceID || cur.ResourceName != a.ResourceName {
			return fmt.Errorf("%w: attachment %s/%s/%s no longer holds device %s; run ADD again",
				ErrClaimLost, a.Network, a.ContainerID, a.IfName, a.DeviceID)
		}
		return s.Put(a)
	})
}
