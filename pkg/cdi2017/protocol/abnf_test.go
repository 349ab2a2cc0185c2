package protocol

import (
	"reflect"
	"strings"
	"testing"
)

func TestABNF(t *testing.T) {
	long := func(n int) string { return "a" + strings.Repeat("1", n-1) }
	for _, c := range []struct {
		check func(string) error
		in    string
		ok    bool
	}{
		{ValidateResourceType, "gpu", true},
		{ValidateResourceType, "G", true},
		{ValidateResourceType, long(16), true},
		{ValidateResourceType, long(17), false},
		{ValidateResourceType, "1gpu", false},
		{ValidateResourceType, "gp-u", false},
		{ValidateResourceType, "gpu_x", false},
		{ValidateResourceType, "", false},
		{ValidateResourceType, "gpü", false},
		{ValidateResourceSubtype, "memory", true},
		{ValidateResourceSubtype, "2048", true},
		{ValidateResourceSubtype, long(15), true},
		{ValidateResourceSubtype, long(16), false},
		{ValidateResourceSubtype, "", false},
		{ValidateRequestID, "1234", true},
		{ValidateRequestID, "a-b-", true},
		{ValidateRequestID, long(64), true},
		{ValidateRequestID, long(65), false},
		{ValidateRequestID, "-ab", false},
		{ValidateRequestID, "a_b", false},
		{ValidateRequestID, "a b", false},
		{ValidateRequestID, "", false},
		{func(s string) error { _, _, err := SplitResourceSpec(s); return err }, "gpu-memory", true},
		{func(s string) error { _, _, err := SplitResourceSpec(s); return err }, "gpu-", false},
		{func(s string) error { _, _, err := SplitResourceSpec(s); return err }, "gpu-mem-ory", false},
		{func(s string) error { _, _, err := SplitResourceSpec(s); return err }, "-memory", false},
	} {
		if err := c.check(c.in); (err == nil) != c.ok {
			t.Errorf("%q: err %v, want ok=%v", c.in, err, c.ok)
		}
	}
}

func TestParseRequest(t *testing.T) {
	got, err := ParseRequest("gpu:1,gpu-memory:2048")
	want := []Amount{{"gpu", 1}, {"gpu-memory", 2048}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, %v", got, err)
	}
	if s := FormatRequest(got); s != "gpu:1,gpu-memory:2048" {
		t.Errorf("format: %q", s)
	}
	for _, bad := range []string{"", "gpu", "gpu:1.5", "gpu:2048Mi", "gpu:-1", "gpu:1,gpu:2", "gpu:1,", "gp u:1", "gpu:"} {
		if _, err := ParseRequest(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if n, err := ParseNUMALocality("0,3"); err != nil || !reflect.DeepEqual(n, []int{0, 3}) {
		t.Errorf("NUMA: %v %v", n, err)
	}
	for _, bad := range []string{"", "a", "0,-1", "0,"} {
		if _, err := ParseNUMALocality(bad); err == nil {
			t.Errorf("NUMA %q accepted", bad)
		}
	}
}
