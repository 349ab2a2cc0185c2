package netshare

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseBandwidth(t *testing.T) {
	for in, want := range map[string]int64{"100M": 100 * Mbit, "10G": 10_000 * Mbit, "1e9": 1000 * Mbit, "1000000": Mbit, "1T": MaxRate} {
		got, err := ParseBandwidth(in)
		if err != nil || got != want {
			t.Errorf("ParseBandwidth(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// Each wrong unit is an error that names the value and says what to write.
func TestParseBandwidthErrors(t *testing.T) {
	for in, want := range map[string]string{
		"10Gi":    "binary suffix",
		"100Mbit": "without a unit",
		"1Gbps":   "without a unit",
		"10MB":    "without a unit",
		"fast":    `"fast" is not a quantity`,
		"1500k":   "not a whole number of Mbit/s",
		"0":       "not a whole number of Mbit/s",
		"-100M":   "not a whole number of Mbit/s",
		"2T":      "more than the kernel's traffic shaper can enforce",
		"100m":    "not a whole number of Mbit/s", // milli: 0.1 bit/s
	} {
		_, err := ParseBandwidth(in)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), in) {
			t.Errorf("ParseBandwidth(%q): %v, want an error naming it with %q", in, err, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	p, err := (&Config{Interfaces: 8, Bandwidth: Bandwidth{Total: "10G", Default: "100M", Step: "100M"}}).Validate()
	if err != nil {
		t.Fatal(err)
	}
	want := Policy{Interfaces: 8, Total: 10_000 * Mbit, Default: 100 * Mbit, Step: 100 * Mbit, Min: 100 * Mbit, Max: 10_000 * Mbit}
	if *p != want {
		t.Fatalf("policy %+v, want %+v", *p, want)
	}
	for c, want := range map[*Config]string{
		{Interfaces: 0, Bandwidth: Bandwidth{Default: "1M"}}:    "share.interfaces 0",
		{Interfaces: 5000, Bandwidth: Bandwidth{Default: "1M"}}: "share.interfaces 5000",
		{Interfaces: 2}: "share.bandwidth.default is required",
		{Interfaces: 2, Bandwidth: Bandwidth{Default: "1Gi"}}:                             "share.bandwidth.default: bandwidth \"1Gi\" has a binary suffix",
		{Interfaces: 2, Bandwidth: Bandwidth{Default: "150M", Step: "100M"}}:              "default 150M is not a multiple of step 100M",
		{Interfaces: 2, Bandwidth: Bandwidth{Total: "1G", Default: "2G"}}:                 "default 2G is outside min 1M and max 1G",
		{Interfaces: 2, Bandwidth: Bandwidth{Total: "1G", Default: "100M", Max: "2G"}}:    "max 2G is more than the total 1G",
		{Interfaces: 2, Bandwidth: Bandwidth{Default: "100M", Step: "100M", Min: "150M"}}: "min 150M is not a multiple of step 100M",
	} {
		if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", *c, err, want)
		}
	}
}

func TestRate(t *testing.T) {
	if r, err := Rate(resource.MustParse("300M")); err != nil || r != 300*Mbit {
		t.Fatalf("Rate(300M) = %d, %v", r, err)
	}
	if _, err := Rate(resource.MustParse("2T")); err == nil {
		t.Fatal("Rate(2T): no error")
	}
}
