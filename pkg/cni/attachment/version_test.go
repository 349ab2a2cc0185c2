package attachment

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// rewrite sets a record's "version" on disk (as another devplumb would have
// written it), or drops the field when version < 0; extra fields are added as is.
func rewrite(t *testing.T, s *Store, k Key, version int, extra map[string]any) string {
	t.Helper()
	p, err := s.path(k)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "version")
	if version >= 0 {
		m["version"] = version
	}
	for k, v := range extra {
		m[k] = v
	}
	data, _ = json.Marshal(m)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkNewer: err is a NewerFormatError naming the file and the version.
func checkNewer(t *testing.T, what string, err error, file string, version int) {
	t.Helper()
	var nf *NewerFormatError
	if !errors.As(err, &nf) || !errors.Is(err, ErrNewerFormat) || nf.File != file || nf.Version != version ||
		!strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "format version 2") {
		t.Errorf("%s: %v, want the newer format of %s (version %d) named", what, err, file, version)
	}
}

func TestEveryRecordCarriesTheFormatVersion(t *testing.T) {
	s := New(t.TempDir())
	got, err := s.Take(req("p", "c1", "net1", "d0"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.path(got.Record.Key)
	data, _ := os.ReadFile(p)
	var v struct{ Version *int }
	if err := json.Unmarshal(data, &v); err != nil || v.Version == nil || *v.Version != FormatVersion {
		t.Fatalf("record on disk has version %v (%v), want %d:\n%s", v.Version, err, FormatVersion, data)
	}
	// Update writes it too, even over a record of an older devplumb without one.
	rewrite(t, s, got.Record.Key, -1, nil)
	old, err := s.Get(got.Record.Key)
	if err != nil || old.Version != 0 || old.Newer() != nil {
		t.Fatalf("record without a version: %+v %v, want read as today", old, err)
	}
	old.Complete = true
	if err := s.Update(old); err != nil {
		t.Fatal(err)
	}
	if cur, _ := s.Get(old.Key); cur.Version != FormatVersion || !cur.Complete {
		t.Errorf("after Update: %+v", cur)
	}
}

// A record of an older devplumb (no version) is read and taken over as before.
func TestOlderRecordIsTakenOverAsToday(t *testing.T) {
	s := New(t.TempDir())
	first, err := s.Take(req("p", "c1", "net1", "d0"))
	if err != nil {
		t.Fatal(err)
	}
	rewrite(t, s, first.Record.Key, -1, nil)
	got, err := s.Take(req("p", "c2", "net1", "d0"))
	if err != nil || got.Record.DeviceID != "d0" || len(got.Dropped) != 1 {
		t.Fatalf("new sandbox over an older devplumb's record: %+v %v", got, err)
	}
	if err := s.Release(got.Record.Key); err != nil {
		t.Fatal(err)
	}
}

// A newer devplumb's record is never taken over, rewritten or released.
func TestNewerRecordIsRefused(t *testing.T) {
	s := New(t.TempDir())
	first, err := s.Take(req("p", "c1", "net1", "d0"))
	if err != nil {
		t.Fatal(err)
	}
	k := first.Record.Key
	p := rewrite(t, s, k, 2, map[string]any{"futureField": "x"})

	_, err = s.Take(req("p", "c1", "net1", "d0")) // a retried ADD of the same attachment
	checkNewer(t, "retried ADD", err, p, 2)
	_, err = s.Take(req("p", "c2", "net1", "d0")) // a new sandbox of the pod
	checkNewer(t, "new sandbox", err, p, 2)
	r := req("other", "c3", "net1", "d0")
	r.Stale = func(*Record) bool { return true }
	_, err = s.Take(r) // another pod the kubelet gave the device to
	checkNewer(t, "stale takeover", err, p, 2)
	if !errors.Is(err, ErrNoFreeDevice) {
		t.Errorf("stale takeover: %v, want no free device too", err)
	}
	r = req("other", "c3", "net1", "d0", "d1")
	r.Stale = func(*Record) bool { return true }
	if got, err := s.Take(r); err != nil || got.Record.DeviceID != "d1" {
		t.Errorf("another candidate is still free: %+v %v", got, err)
	}
	checkNewer(t, "release", s.Release(k), p, 2)
	cur, err := s.Get(k)
	checkNewer(t, "Newer", cur.Newer(), p, 2)
	if err != nil || cur.Version != 2 {
		t.Fatalf("the newer record after all that: %+v %v", cur, err)
	}
	checkNewer(t, "update", s.Update(cur), p, 2)
	if err := s.ReleaseHeld(cur); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(p); !strings.Contains(string(data), "futureField") {
		t.Errorf("the newer record was rewritten or removed: %s", data)
	}
}

// A newer record this devplumb cannot even decode is not corrupt: GC keeps it.
func TestUndecodableNewerRecordIsNotCorrupt(t *testing.T) {
	s := New(t.TempDir())
	first, err := s.Take(req("p", "c1", "net1", "d0"))
	if err != nil {
		t.Fatal(err)
	}
	p := rewrite(t, s, first.Record.Key, 2, map[string]any{"deviceID": []string{"changed", "type"}})
	_, err = s.Get(first.Record.Key)
	checkNewer(t, "get", err, p, 2)
	removed, err := s.RemoveCorrupt("net", func(Key) bool { return false })
	if err != nil || len(removed) != 0 {
		t.Errorf("RemoveCorrupt removed %v (%v)", removed, err)
	}
	checkNewer(t, "release", s.Release(first.Record.Key), p, 2)
	if _, err := os.Stat(p); err != nil {
		t.Errorf("the newer record is gone: %v", err)
	}
	// Today's corrupt records still go.
	rewrite(t, s, first.Record.Key, 1, map[string]any{"deviceID": []string{"bad"}})
	if removed, err := s.RemoveCorrupt("net", func(Key) bool { return false }); err != nil || len(removed) != 1 {
		t.Errorf("a corrupt record of this format: removed %v (%v)", removed, err)
	}
}
