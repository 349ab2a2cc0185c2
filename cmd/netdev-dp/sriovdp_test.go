package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
