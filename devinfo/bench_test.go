package devinfo

import (
	"os"
	"testing"
)

// The device-info work on devplumb's ADD path: parse and validate a DP
// file, and copy it to the attachment's CNI file.
func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile("testdata/spec/6.1.2-vdpa.json")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCopyDPToCNI(b *testing.B) {
	s := NewStore(b.TempDir())
	if err := s.WriteDP("example.com/vf", "0000:01:02.2", pciInfo("0000:01:02.2")); err != nil {
		b.Fatal(err)
	}
	dst, _ := s.CNIPath("net-c_net1")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.CopyDPToCNI("example.com/vf", "0000:01:02.2", dst); err != nil {
			b.Fatal(err)
		}
	}
}
