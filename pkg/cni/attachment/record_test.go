package attachment

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// req asks for a device for pod ns/pod (UID "uid-"+pod); every other
// sandbox counts as gone.
func req(pod, cid, ifname string, cands ...string) Request {
	return Request{
		Key:          Key{Network: "net", ContainerID: cid, IfName: ifname},
		Pod:          Pod{Namespace: "ns", Name: pod, UID: "uid-" + pod},
		ResourceName: "example.com/vf",
		Candidates:   cands,
		SandboxGone:  func(*Record) bool { return true },
	}
}

func TestTwoAttachmentsOfOnePodGetTwoDevices(t *testing.T) {
	s := New(t.TempDir())
	a, err := s.Take(req("p", "c1", "net1", "d0", "d1"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Take(req("p", "c1", "net2", "d0", "d1"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Record.DeviceID != "d0" || b.Record.DeviceID != "d1" {
		t.Errorf("got %s and %s, want d0 and d1", a.Record.DeviceID, b.Record.DeviceID)
	}
	_, err = s.Take(req("p", "c1", "net3", "d0", "d1"))
	if !errors.Is(err, ErrNoFreeDevice) || !strings.Contains(err.Error(), "ns/p") || !strings.Contains(err.Error(), "net2") {
		t.Errorf("third take: %v", err)
	}
}

func TestRetryGetsSameDeviceAndReleaseFrees(t *testing.T) {
	s := New(t.TempDir())
	r := req("p", "c1", "net1", "d0", "d1")
	a, _ := s.Take(r)
	_, _ = s.Take(req("p", "c1", "net2", "d0", "d1"))
	again, err := s.Take(r)
	if err != nil || again.Record.DeviceID != a.Record.DeviceID {
		t.Fatalf("retry: %v %+v", err, again)
	}
	if err := s.Release(r.Key); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(r.Key); err != nil {
		t.Fatalf("second release must succeed: %v", err)
	}
	got, err := s.Get(r.Key)
	if err != nil || got != nil {
		t.Fatalf("record after release: %v %v", got, err)
	}
}

func TestOlderSandboxIsDropped(t *testing.T) {
	s := New(t.TempDir())
	if _, err := s.Take(req("p", "old", "net1", "d0")); err != nil {
		t.Fatal(err)
	}
	c, err := s.Take(req("p", "new", "net1", "d0"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Record.DeviceID != "d0" || len(c.Dropped) != 1 || c.Dropped[0].ContainerID != "old" {
		t.Fatalf("take: %+v dropped %+v", c.Record, c.Dropped)
	}
	all, _ := s.List()
	if len(all) != 1 || all[0].ContainerID != "new" {
		t.Errorf("state: %+v", all)
	}
}

func TestConcurrentPodsNeverShare(t *testing.T) {
	s := New(t.TempDir())
	var devs []string
	for i := range 32 {
		devs = append(devs, fmt.Sprintf("d%d", i))
	}
	var wg sync.WaitGroup
	got := make([]string, 32)
	errs := make([]error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := s.Take(req(fmt.Sprintf("p%d", i), fmt.Sprintf("c%d", i), "net1", devs...))
			errs[i] = err
			if err == nil {
				got[i] = c.Record.DeviceID
			}
		}()
	}
	wg.Wait()
	seen := map[string]int{}
	for i, d := range got {
		if errs[i] != nil {
			t.Fatalf("pod %d: %v", i, errs[i])
		}
		if j, dup := seen[d]; dup {
			t.Fatalf("pods %d and %d share %s", i, j, d)
		}
		seen[d] = i
	}
}

func TestUnsafeKeyAndCorruptState(t *testing.T) {
	s := New(t.TempDir())
	r := req("p", "../../etc", "net1", "d0")
	if _, err := s.Take(r); err == nil {
		t.Fatal("a container ID with .. must be refused")
	}
	if _, err := s.Take(req("p", "c1", "..", "d0")); err == nil {
		t.Fatal("an interface name .. must be refused")
	}
	if _, err := s.Take(req("p", "c1", "x%y#z", "d0")); err != nil {
		t.Fatalf("any interface name the kernel takes is fine: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(s.Dir, "attachments"), 0o700); err != nil {
		t.Fatal(err)
	}
	bad, err := s.path(Key{"net", "c1", "net1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(Key{"net", "c1", "net1"}); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("corrupt record: %v", err)
	}
}

// One corrupt record (of another attachment) must not stop every ADD on the
// node: Take passes over it and reports it.
func TestCorruptRecordDoesNotWedgeTake(t *testing.T) {
	s := New(t.TempDir())
	if _, err := s.Take(req("p", "c0", "net1", "d0")); err != nil {
		t.Fatal(err)
	}
	p, _ := s.path(Key{"net", "c0", "net1"})
	if err := os.WriteFile(p, []byte("{trunc"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := s.Take(req("q", "c1", "net1", "d1"))
	if err != nil || c.Record.DeviceID != "d1" {
		t.Fatalf("take beside a corrupt record: %+v %v", c, err)
	}
	if c.Unreadable == nil || !strings.Contains(c.Unreadable.Error(), p) {
		t.Errorf("the corrupt record is not reported: %v", c.Unreadable)
	}
	if err := s.Release(Key{"net", "c0", "net1"}); err != nil {
		t.Fatalf("release of a corrupt record: %v", err)
	}
	if all, err := s.List(); err != nil || len(all) != 1 {
		t.Errorf("after release: %v %v", all, err)
	}
}

// Attachments whose names would join to the same string with '-' and '_'
// keep separate records.
func TestLookalikeKeysDoNotCollide(t *testing.T) {
	s := New(t.TempDir())
	a, b := req("p", "c", "net1", "d0", "d1"), req("p", "c", "net1", "d0", "d1")
	a.Network, b.Network, b.ContainerID = "a-b", "a", "b-c"
	a.ContainerID = "c"
	b.Pod = Pod{Namespace: "ns", Name: "other"}
	for _, r := range []Request{a, b} {
		if _, err := s.Take(r); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.List()
	if err != nil || len(all) != 2 || all[0].DeviceID == all[1].DeviceID {
		t.Fatalf("records %+v %v: want two with different devices", all, err)
	}
	if _, err := s.Take(req("p", "c1", "a b", "d0")); err == nil {
		t.Error("an interface name with a space must be refused")
	}
}

// An ADD whose record was dropped while it ran (a newer sandbox of the pod took
// the device) cannot write it back: that would hand the device out twice.
// droppedRecord is sandbox c1's record of device d0, dropped from s when the
// pod's newer sandbox c2 took the device.
func droppedRecord(t *testing.T, s *Store) *Record {
	t.Helper()
	old, err := s.Take(req("p", "c1", "net1", "d0"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(req("p", "c2", "net1", "d0")); err != nil {
		t.Fatal(err)
	}
	return old.Record
}

func TestUpdateAfterDropIsRefused(t *testing.T) {
	s := New(t.TempDir())
	old := droppedRecord(t, s)
	old.Complete = true
	if err := s.Update(old); !errors.Is(err, ErrDeviceLost) {
		t.Fatalf("update of a dropped record: %v", err)
	}
	all, _ := s.List()
	if len(all) != 1 || all[0].ContainerID != "c2" {
		t.Errorf("records %+v: want only the new sandbox's", all)
	}
}

func TestStaleRecordOfAnotherPodIsDropped(t *testing.T) {
	s := New(t.TempDir())
	if _, err := s.Take(req("gone", "c0", "net1", "d0")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(req("live", "c1", "net1", "d0")); !errors.Is(err, ErrNoFreeDevice) {
		t.Fatalf("without Stale the holder keeps the device: %v", err)
	}
	r := req("live", "c1", "net1", "d0")
	r.Stale = func(a *Record) bool { return a.Pod.Name == "gone" }
	c, err := s.Take(r)
	if err != nil || c.Record.DeviceID != "d0" || len(c.Dropped) != 1 || c.Dropped[0].Pod.Name != "gone" {
		t.Fatalf("take %+v %v", c, err)
	}
}

// TestAskFirstOnlyBeforeEveryFreeCandidate: a holder AskFirst names ends
// Take with ErrAskFirst, nothing written, when it stands before every free
// candidate; a free candidate ahead of it is taken without asking; a holder
// Stale calls stale is taken over before AskFirst is asked about it.
func TestAskFirstOnlyBeforeEveryFreeCandidate(t *testing.T) {
	s := New(t.TempDir())
	for i, pod := range []string{"other", "mine"} {
		if _, err := s.Take(req(pod, fmt.Sprintf("c%d", i), "net1", fmt.Sprintf("d%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	askOther := func(a *Record) bool { return a.Pod.Name == "other" }
	r := req("new", "cn", "net1", "d0", "d2")
	r.AskFirst = askOther
	if c, err := s.Take(r); !errors.Is(err, ErrAskFirst) || c.Record != nil {
		t.Fatalf("d0's holder before free d2: %+v %v, want ErrAskFirst and nothing taken", c, err)
	}
	if all, _ := s.List(); len(all) != 2 {
		t.Fatalf("ErrAskFirst left %d records, want the two holders'", len(all))
	}
	r = req("new", "cn", "net1", "d1", "d2", "d0")
	r.AskFirst = askOther
	if c, err := s.Take(r); err != nil || c.Record.DeviceID != "d2" {
		t.Fatalf("free d2 before d0's holder: %+v %v, want d2 without asking", c, err)
	}
	if err := s.Release(r.Key); err != nil {
		t.Fatal(err)
	}
	r = req("new", "cn", "net1", "d0", "d2")
	r.AskFirst = func(*Record) bool { return true }
	r.Stale = askOther
	if c, err := s.Take(r); err != nil || c.Record.DeviceID != "d0" || len(c.Dropped) != 1 {
		t.Fatalf("stale holder of d0: %+v %v, want d0 taken over", c, err)
	}
}

// TestTakeHandsBackWholeRecords: Take sorts the records by their headers
// alone, and hands back whole ones: the attachment's own record, and every
// record it takes over, with the delegate config and result their undoing
// needs.
func TestTakeHandsBackWholeRecords(t *testing.T) {
	s := New(t.TempDir())
	for i, pod := range []string{"gone", "mine"} {
		r := req(pod, fmt.Sprintf("c%d", i), "net1", fmt.Sprintf("d%d", i))
		r.Fill = completed
		if _, err := s.Take(r); err != nil {
			t.Fatal(err)
		}
	}
	whole := func(a *Record) bool {
		return a != nil && len(a.Delegate) > 0 && len(a.Result) > 0 && len(a.Phases) > 0 && !a.headerOnly
	}
	own, err := s.Take(req("mine", "c1", "net1", "d1"))
	if err != nil || !whole(own.Record) {
		t.Fatalf("own record from Take: %+v %v, want the whole record", own.Record, err)
	}
	r := req("new", "c2", "net1", "d0")
	r.Stale = func(a *Record) bool { return a.Pod.Name == "gone" }
	c, err := s.Take(r)
	if err != nil || len(c.Dropped) != 1 || !whole(c.Dropped[0]) {
		t.Fatalf("taken over: %+v %v, want the whole record of pod gone", c, err)
	}
	moved := req("mine", "c1", "net1", "d3")
	c, err = s.Take(moved)
	if err != nil || c.Record.DeviceID != "d3" || len(c.Dropped) != 1 || !whole(c.Dropped[0]) {
		t.Fatalf("own record for another device: %+v %v, want its whole old record dropped", c, err)
	}
}

// GC can clear unreadable records: only the network's, only unwanted ones.
func TestRemoveCorrupt(t *testing.T) {
	s := New(t.TempDir())
	for _, cid := range []string{"keep", "drop", "fine"} {
		if _, err := s.Take(req("p"+cid, cid, "net1", "d-"+cid)); err != nil {
			t.Fatal(err)
		}
	}
	for _, cid := range []string{"keep", "drop"} {
		p, _ := s.path(Key{"net", cid, "net1"})
		if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other, _ := s.path(Key{"other", "drop", "net1"})
	if err := os.WriteFile(other, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := s.RemoveCorrupt("net", func(k Key) bool { return k.ContainerID == "keep" })
	if err != nil || len(got) != 1 || got[0] != (Key{"net", "drop", "net1"}) {
		t.Fatalf("removed %v %v", got, err)
	}
	if all, err := s.List(); len(all) != 1 || all[0].ContainerID != "fine" || err == nil {
		t.Errorf("left %+v %v: want the readable record and two corrupt ones reported", all, err)
	}
}

// The same attachment asking for another device drops its old record (the
// caller undoes it); a new sandbox's take failing still reports the older
// sandbox's records it dropped.
func TestReplacedAndDroppedAreReported(t *testing.T) {
	s := New(t.TempDir())
	if _, err := s.Take(req("p", "c1", "net1", "d0")); err != nil {
		t.Fatal(err)
	}
	c, err := s.Take(req("p", "c1", "net1", "d1"))
	if err != nil || c.Record.DeviceID != "d1" || len(c.Dropped) != 1 || c.Dropped[0].DeviceID != "d0" {
		t.Fatalf("take of another device: %+v %v", c, err)
	}
	if _, err := s.Take(req("q", "c9", "net1", "d2")); err != nil {
		t.Fatal(err)
	}
	c, err = s.Take(req("p", "c2", "net1", "d2"))
	if !errors.Is(err, ErrNoFreeDevice) || c == nil || len(c.Dropped) != 1 || c.Dropped[0].ContainerID != "c1" {
		t.Fatalf("failed take of a new sandbox: %+v %v", c, err)
	}
}

// A device injected by the caller (recorded under no resource) and the same ID
// asked for under a resource are one device, in either order; two named
// resources keep their own IDs.
func TestInjectedDeviceIsHeldForEveryResource(t *testing.T) {
	s := New(t.TempDir())
	injected := req("p", "c1", "net1", "d0")
	injected.ResourceName = ""
	if _, err := s.Take(injected); err != nil {
		t.Fatal(err)
	}
	named, err := s.Take(req("p", "c1", "net2", "d0", "d1"))
	if err != nil || named.Record.DeviceID != "d1" {
		t.Fatalf("resourceName after an injected d0: %v %+v, want d1", err, named)
	}

	s = New(t.TempDir())
	if _, err := s.Take(req("p", "c1", "net2", "d0", "d1")); err != nil {
		t.Fatal(err)
	}
	_, err = s.Take(injected)
	if !errors.Is(err, ErrNoFreeDevice) || !strings.Contains(err.Error(), "d0 held by pod ns/p") || !strings.Contains(err.Error(), "interface net2") {
		t.Fatalf("injected d0 after resourceName took it: %v, want no free device naming the holder", err)
	}

	other := req("p", "c1", "net3", "d0")
	other.ResourceName = "example.com/other"
	if got, err := s.Take(other); err != nil || got.Record.DeviceID != "d0" {
		t.Fatalf("another resource's d0: %v %+v", err, got)
	}
}

// Fill completes a fresh record before its one write (issue 38: a fresh ADD
// writes its record once before the delegates run), never touches a record
// the attachment holds already, and a Fill that fails takes nothing.
func TestFillIsWrittenWithTheTake(t *testing.T) {
	s := New(t.TempDir())
	r := req("p", "c1", "net1", "d0", "d1")
	calls := 0
	r.Fill = func(a *Record) error {
		calls++
		if a.DeviceID != "d0" {
			t.Errorf("Fill got device %q before the pick", a.DeviceID)
		}
		a.CNIFile, a.Delegate = "/run/cni-file", []byte(`{"cniVersion":"1.0.0"}`)
		return nil
	}
	if _, err := s.Take(r); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(r.Key)
	var delegate bytes.Buffer
	if err == nil && got != nil {
		err = json.Compact(&delegate, got.Delegate)
	}
	if err != nil || got == nil || got.CNIFile != "/run/cni-file" || delegate.String() != `{"cniVersion":"1.0.0"}` {
		t.Fatalf("record after a filled take: %+v, %v", got, err)
	}
	again, err := s.Take(r)
	if err != nil || calls != 1 || again.Record.CNIFile != "/run/cni-file" {
		t.Fatalf("retried take: Fill called %d times, record %+v, %v", calls, again, err)
	}

	bad := req("q", "c2", "net1", "d1")
	bad.Fill = func(*Record) error { return errors.New("no delegate") }
	if _, err := s.Take(bad); err == nil || !strings.Contains(err.Error(), "no delegate") {
		t.Fatalf("a failing Fill: %v", err)
	}
	if got, err := s.Get(bad.Key); err != nil || got != nil {
		t.Fatalf("a failing Fill left a record: %+v, %v", got, err)
	}
	if ok, err := s.Take(req("q", "c2", "net1", "d1")); err != nil || ok.Record.DeviceID != "d1" {
		t.Fatalf("d1 is not free after a failing Fill: %+v, %v", ok, err)
	}
}

// Retire writes the record undone before it removes the files the record names,
// keeps it (undone) when they cannot go, and removes it once they are gone.
func TestRetire(t *testing.T) {
	s := New(t.TempDir())
	r := req("p", "c1", "net1", "d0")
	taken, err := s.Take(r)
	if err != nil {
		t.Fatal(err)
	}
	rec := taken.Record
	rec.Complete = true
	if err := s.Update(rec); err != nil {
		t.Fatal(err)
	}
	rec.Complete = false
	noUndoneErr := func(err error) { t.Errorf("undone not written: %v", err) }
	gone := errors.New("file busy")
	err = s.Retire(r.Key, rec, noUndoneErr, func() error {
		if cur, err := s.Get(r.Key); err != nil || cur == nil || cur.Complete {
			t.Errorf("while the files go, the record is %+v (%v): want it undone", cur, err)
		}
		return gone
	})
	if !errors.Is(err, gone) {
		t.Fatalf("retire with files that stay: %v", err)
	}
	if cur, _ := s.Get(r.Key); cur == nil || cur.Complete {
		t.Fatalf("the files stayed: the record must stay, undone: %+v", cur)
	}
	removed := false
	if err := s.Retire(r.Key, rec, noUndoneErr, func() error { removed = true; return nil }); err != nil || !removed {
		t.Fatalf("retire: %v (files removed %v)", err, removed)
	}
	if cur, err := s.Get(r.Key); err != nil || cur != nil {
		t.Fatalf("record after retire: %+v %v", cur, err)
	}
}

// An undone record that cannot be written (its device went to another sandbox)
// is reported and the DEL goes on, removing nothing of the other sandbox's.
func TestRetireOfALostDevice(t *testing.T) {
	s := New(t.TempDir())
	old := droppedRecord(t, s)
	var undoneErr error
	err := s.Retire(old.Key, old, func(err error) { undoneErr = err }, func() error { return nil })
	if err != nil || !errors.Is(undoneErr, ErrDeviceLost) {
		t.Fatalf("retire: %v, undone: %v", err, undoneErr)
	}
	if all, _ := s.List(); len(all) != 1 || all[0].ContainerID != "c2" {
		t.Errorf("records %+v: want only the new sandbox's", all)
	}
}
