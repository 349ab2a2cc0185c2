package attachment

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzRecord: no state file content panics the record parser; a record it
// accepts is encoded back and read again unchanged.
func FuzzRecord(f *testing.F) {
	f.Add([]byte(`{"network":"n","containerID":"c","ifName":"net1","pod":{"namespace":"ns","name":"p","uid":"u"},` +
		`"resourceName":"example.com/vf","deviceID":"0000:01:00.1","cniFile":"/d/cni/n-c_net1",` +
		`"delegate":{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"host-device"}]},"netns":"/var/run/netns/x",` +
		`"cniArgs":[["K8S_POD_NAME","p"]],"capabilityArgs":{"deviceID":"0000:01:00.1"},"complete":true,` +
		`"result":{"cniVersion":"1.0.0"},"networkStatus":{"name":"n","interface":"net1"}}`))
	f.Add([]byte(`{"network":`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"delegate":1e999}`))
	f.Add([]byte(`{"cniArgs":[["a"]],"capabilityArgs":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New(t.TempDir())
		if err := os.MkdirAll(s.attachDir(), 0o700); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(s.attachDir(), "n:c:net1.json")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := readRecord(p)
		if err != nil || a == nil {
			return
		}
		// Encoded as Put does, written without Put's fsyncs (they would
		// slow the fuzzer a hundredfold).
		out, err := json.MarshalIndent(a, "", "  ")
		if err != nil {
			return // raw JSON that only decodes (e.g. a huge number in "result")
		}
		if err := os.WriteFile(p, out, 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := readRecord(p)
		if err != nil || !reflect.DeepEqual(normalize(t, a), normalize(t, again)) {
			t.Fatalf("round trip: %+v\n%+v\n%v", a, again, err)
		}
	})
}

// normalize is a record as JSON decodes it (numbers as written, raw JSON
// compacted), so two equal records compare equal.
func normalize(t *testing.T, a *Record) any {
	data, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // raw JSON may hold numbers no float64 takes
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// FuzzRecordName: every key gets a file name within the limit; a plain
// name parses back to its key, and two keys never share a name.
func FuzzRecordName(f *testing.F) {
	f.Add("net", "c1", "net1", "net", "c1", "net2")
	f.Add(strings.Repeat("n", 250), "c", "e", strings.Repeat("n", 250), "c", "f")
	f.Add("a-b", "c", "d", "a", "b-c", "d")
	f.Fuzz(func(t *testing.T, n1, c1, i1, n2, c2, i2 string) {
		k1, k2 := Key{n1, c1, i1}, Key{n2, c2, i2}
		s := New("/state")
		p1, err1 := s.path(k1)
		p2, err2 := s.path(k2)
		if err1 != nil || err2 != nil {
			return // not a name the CNI specification allows
		}
		if len(filepath.Base(p1)) > maxName {
			t.Fatalf("name of %d bytes", len(filepath.Base(p1)))
		}
		if k, ok := keyOf(filepath.Base(p1)); ok && k != k1 {
			t.Fatalf("name %s parses to %+v, not %+v", p1, k, k1)
		}
		if k1 != k2 && p1 == p2 {
			t.Fatalf("%+v and %+v share %s", k1, k2, p1)
		}
	})
}
