package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"
)

// TestSRIOVDPConfigFile: the SR-IOV device plugin's config is taken by its
// shape under --config or its own --config-file, with --resource-prefix
// as the default prefix; a bad one fails naming the resource; the prefix
// flag with netdev-dp's own config is refused (it would be ignored).
func TestSRIOVDPConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"resourceList": [{"resourceName": "vf", "selectors": {"drivers": ["iavf"]}}]}`)
	for _, flag := range []string{"--config", "--config-file", "-config-file"} {
		o, code := parse([]string{flag, good, "--resource-prefix", "example.org"}, io.Discard, io.Discard)
		if o == nil {
			t.Fatalf("%s: exit %d", flag, code)
		}
		cfg, err := loadConfig(o)
		if err != nil || len(cfg.Resources) != 1 || cfg.Resources[0].ResourceName != "example.org/vf" {
			t.Errorf("%s: %+v %v", flag, cfg, err)
		}
	}
	o, _ := parse([]string{"--config-file", good}, io.Discard, io.Discard)
	if cfg, err := loadConfig(o); err != nil || cfg.Resources[0].ResourceName != "intel.com/vf" {
		t.Errorf("default prefix: %+v %v", cfg, err)
	}
	var out bytes.Buffer
	bad := write("bad.json", `{"resourceList": [{"resourceName": "e800", "selectors": [{"ddpProfiles": ["ICE COMMS Package"]}]}]}`)
	if code := run([]string{"--config-file", bad}, io.Discard, &out); code != 1 || !strings.Contains(out.String(), "resourceList[0] (e800): selectors[0]: ddpProfiles") {
		t.Errorf("ddpProfiles: code %d, %s", code, out.String())
	}
	own := write("own.json", `{"resources": [{"resourceName": "example.com/vf", "pci": {}}]}`)
	out.Reset()
	if code := run([]string{"--config", own, "--resource-prefix", "x.org"}, io.Discard, &out); code != 1 || !strings.Contains(out.String(), "--resource-prefix applies to an SR-IOV network device plugin config") {
		t.Errorf("--resource-prefix with netdev-dp's config: code %d, %s", code, out.String())
	}
}

// TestPrintDeviceClasses: the DeviceClasses for an SR-IOV device plugin
// config, as a YAML stream that decodes into resource.k8s.io/v1 classes.
func TestPrintDeviceClasses(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(p, []byte(`{"resourceList": [{"resourceName": "sriov_net", "selectors": {"drivers": ["iavf"]}},
		{"resourceName": "sriov_dpdk", "resourcePrefix": "example.org", "selectors": {"drivers": ["vfio-pci"]}}]}`), 0o644)
	var out bytes.Buffer
	if code := run([]string{"--config-file", p, "--print-device-classes", "--driver-name", "dra.example.com"}, &out, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	docs := strings.Split(strings.TrimPrefix(out.String(), "---\n"), "---\n")
	want := map[string]string{"sriov-net.intel.com": "intel.com/sriov_net", "sriov-dpdk.example.org": "example.org/sriov_dpdk"}
	if len(docs) != len(want) {
		t.Fatalf("%d documents:\n%s", len(docs), out.String())
	}
	for _, doc := range docs {
		var c resourceapi.DeviceClass
		if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		ext := want[c.Name]
		if c.APIVersion != "resource.k8s.io/v1" || c.Kind != "DeviceClass" || c.Spec.ExtendedResourceName == nil || *c.Spec.ExtendedResourceName != ext ||
			!strings.Contains(c.Spec.Selectors[0].CEL.Expression, `device.driver == "dra.example.com"`) {
			t.Errorf("class %s:\n%s", c.Name, doc)
		}
	}
}
