package resources

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`{
		"resyncInterval": "2s",
		"resources": [
			{"resourceName": "example.com/vf", "pci": {"vendors": ["8086"], "pfNames": ["ens1f0"]}},
			{"resourceName": "example.com/netdev", "netdevs": {"names": ["eth*"]}},
			{"resourceName": "example.com/vhu", "vhostUser": {"socketDir": "/run/vhu", "mode": "client"}},
			{"resourceName": "example.com/memif", "memif": {"socketDir": "/run/memif", "role": "slave", "mode": "ip"}},
			{"resourceName": "example.com/vdpa", "vdpa": {"drivers": ["vhost"]}}
		]}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Resync.Duration != 2*time.Second || len(c.Resources) != 5 || c.Resources[0].PCI.PFNames[0] != "ens1f0" {
		t.Fatalf("%+v", c)
	}
}

func TestParseConfigErrors(t *testing.T) {
	cases := map[string]string{
		`{"resources": []}`: "at least one resource",
		`{"resources": [{"resourceName": "example.com/a", "netdevs": {"names": ["x"]}}], "extra": 1}`:                                                     `unknown field "extra"`,
		`{"resources": [{"resourceName": "example.com/a"}]}`:                                                                                              "exactly one of",
		`{"resources": [{"resourceName": "example.com/a", "netdevs": {"names": ["x"]}, "pci": {}}]}`:                                                      "found 2",
		`{"resources": [{"resourceName": "noslash", "netdevs": {"names": ["x"]}}]}`:                                                                       "domain-qualified",
		`{"resources": [{"resourceName": "kubernetes.io/a", "netdevs": {"names": ["x"]}}]}`:                                                               "reserved",
		`{"resources": [{"resourceName": "example.com/a b", "netdevs": {"names": ["x"]}}]}`:                                                               "name part must consist",
		`{"resyncInterval": "soon", "resources": [{"resourceName": "example.com/a", "netdevs": {"names": ["x"]}}]}`:                                       `invalid duration "soon"`,
		`{"resyncInterval": "-5s", "resources": [{"resourceName": "example.com/a", "netdevs": {"names": ["x"]}}]}`:                                        "resyncInterval -5s is negative",
		`{"resources": [{"resourceName": "example.com/a", "netdevs": {"names": ["x"]}}, {"resourceName": "example.com/a", "netdevs": {"names": ["y"]}}]}`: "configured twice",
		`{"resources": [{"resourceName": "example.com/a", "pci": {"vendor": ["8086"]}}]}`:                                                                 `unknown field "vendor"`,
		`{"resources": [{"resourceName": "example.com/a", "netdevs": {"names": ["x"]}}]} {}`:                                                              "trailing data",
		"{\"resources\": [\n  {\"resourceName\": \"example.com/a\",}\n]}":                                                                                 "at line 2, column 36",
		`{"resources": [{"resourceName": "example.com/a", "pci": {"vendors": ["0x8086"]}}]}`:                                                              `resources[0] (example.com/a): pci source: vendors: "0x8086"`,
		"{\"resources\": [\n  {\"resourceName\": 7}]}":                                                                                                    "at line 2, column 20",
	}
	for in, want := range cases {
		_, err := ParseConfig([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want error containing %q", in, err, want)
		}
	}
}

// LoadConfig reads only a regular file of bounded size, never blocking: a
// FIFO or /dev/zero given as --config is an error naming it. A link to a
// good file (a ConfigMap mount) is followed.
func TestLoadConfigHostileFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte(`{"resources":[{"resourceName":"example.com/a","netdevs":{"names":["x"]}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte(" "), maxConfigSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"zero": "/dev/zero", "lfifo": fifo, "lgood": good}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"fifo", "zero", "lfifo", "big", "good", "lgood"} {
		path := filepath.Join(dir, name)
		done := make(chan error, 1)
		go func() { _, err := LoadConfig(path); done <- err }()
		select {
		case err := <-done:
			if ok := strings.HasSuffix(name, "good"); ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), path)) {
				t.Errorf("%s: %v", name, err)
			}
		case <-ctx.Done():
			t.Fatalf("LoadConfig(%s) did not return", path)
		}
	}
}

// A shareable resource is a netdevs or pci one with a valid share policy;
// each mistake names the resource and the field.
func TestParseConfigShare(t *testing.T) {
	c, err := ParseConfig([]byte(`{"resources": [{"resourceName": "example.com/shared", "netdevs": {"names": ["eth1"]},
		"share": {"interfaces": 4, "bandwidth": {"total": "1G", "default": "100M", "step": "50M"}}}]}`))
	if err != nil || c.Resources[0].Share.Interfaces != 4 {
		t.Fatalf("%+v, %v", c, err)
	}
	cases := map[string]string{
		`{"resources": [{"resourceName": "example.com/a", "memif": {"socketDir": "/run/m"}, "share": {"interfaces": 2, "bandwidth": {"default": "1M"}}}]}`: "resources[0] (example.com/a): share: only netdevs and pci",
		`{"resources": [{"resourceName": "example.com/a", "netdevs": {"names": ["x"]}, "share": {"interfaces": 2, "bandwidth": {"default": "1Gi"}}}]}`:     `resources[0] (example.com/a): share.bandwidth.default: bandwidth "1Gi" has a binary suffix`,
		`{"resources": [{"resourceName": "example.com/a", "netdevs": {"names": ["x"]}, "share": {"interfaces": 2, "bandwidth": {"default": 100}}}]}`:       "cannot unmarshal number",
		`{"resources": [{"resourceName": "example.com/a", "netdevs": {"names": ["x"]}, "share": {"interfaces": 2, "bandwith": {"default": "1M"}}}]}`:       `unknown field "bandwith"`,
	}
	for in, want := range cases {
		if _, err := ParseConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want error containing %q", in, err, want)
		}
	}
}

// pfBandwidth belongs to a pci resource that is not shared; each mistake is named.
func TestParseConfigPFBandwidth(t *testing.T) {
	if _, err := ParseConfig([]byte(`{"resources": [{"resourceName": "example.com/vf", "pci": {}, "pfBandwidth": {"perVF": "5G"}}]}`)); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		`{"resources": [{"resourceName": "example.com/a", "netdevs": {"names": ["x"]}, "pfBandwidth": {"perVF": "1G"}}]}`:                                           "resources[0] (example.com/a): pfBandwidth: only a pci resource",
		`{"resources": [{"resourceName": "example.com/a", "pci": {}, "pfBandwidth": {"total": "10G"}}]}`:                                                            "pfBandwidth.perVF is required",
		`{"resources": [{"resourceName": "example.com/a", "pci": {}, "pfBandwidth": {"total": "1G", "perVF": "2G"}}]}`:                                              "pfBandwidth.perVF 2G is more than the total 1G",
		`{"resources": [{"resourceName": "example.com/a", "pci": {}, "pfBandwidth": {"perVF": "2Gi"}}]}`:                                                            `pfBandwidth.perVF: bandwidth "2Gi" has a binary suffix`,
		`{"resources": [{"resourceName": "example.com/a", "pci": {}, "pfBandwidth": {"perVF": "2G"}, "share": {"interfaces": 2, "bandwidth": {"default": "1M"}}}]}`: "pfBandwidth and share",
	} {
		if _, err := ParseConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want error containing %q", in, err, want)
		}
	}
}
