package attachment

import (
	"fmt"
	"testing"
)

// BenchmarkTakeRelease: one ADD's and one DEL's state work on a node that
// already holds 64 attachments.
func BenchmarkTakeRelease(b *testing.B) {
	s := New(b.TempDir())
	for i := range 64 {
		if _, err := s.Take(req(fmt.Sprintf("p%d", i), fmt.Sprintf("c%d", i), "net1", fmt.Sprintf("d%d", i))); err != nil {
			b.Fatal(err)
		}
	}
	r := req("bench", "cb", "net1", "free")
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Take(r); err != nil {
			b.Fatal(err)
		}
		if err := s.Release(r.Key); err != nil {
			b.Fatal(err)
		}
	}
}
