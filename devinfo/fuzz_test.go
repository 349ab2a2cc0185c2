package devinfo

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: no input panics; whatever Parse accepts survives a round trip
// through the NAD client types and validates again.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/spec/*.json")
	for _, p := range files {
		data, _ := os.ReadFile(p)
		f.Add(data)
	}
	f.Add([]byte(`{"type":"memif","version":"1.1.0","memif":{"role":"master","path":"/a","mode":"ip"}}`))
	f.Add([]byte(`{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:01:1f.7"}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"Type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2","pci-address":"0000:01:02.3"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := Parse(data)
		if err != nil {
			if info != nil {
				t.Fatal("error with a result")
			}
			return
		}
		out, err := json.Marshal(info)
		if err != nil {
			t.Fatalf("marshal accepted info: %v", err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("round trip of %s failed: %v", out, err)
		}
	})
}

// FuzzPaths: any name DPPath or CNIPath accepts is a single file directly in
// its subdirectory of the store.
func FuzzPaths(f *testing.F) {
	f.Add("intel.com/sriov", "0000:01:02.2", "net-abc_net1")
	f.Add("../x", "..", "..")
	f.Add("a/b/c", "x/y", "a/../../b")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, res, id, cniName string) {
		s := NewStore("/devinfo")
		if p, err := s.DPPath(res, id); err == nil {
			checkInside(t, p, "/devinfo/dp")
			if !strings.HasSuffix(p, "-device.json") {
				t.Fatalf("DP path %q lacks the suffix", p)
			}
		}
		if p, err := s.CNIPath(cniName); err == nil {
			checkInside(t, p, "/devinfo/cni")
		}
	})
}

func checkInside(t *testing.T, p, dir string) {
	t.Helper()
	if filepath.Dir(p) != dir || strings.ContainsRune(p, 0) {
		t.Fatalf("path %q is not a file directly in %s", p, dir)
	}
	base := filepath.Base(p)
	if base == "." || base == ".." || base == "/" {
		t.Fatalf("path %q names no file", p)
	}
}
