package devinfo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The one example the spec prints without a defect.
const printedValid = "testdata/spec/4.3-vhost-user.printed.json"

func TestSpecExamplesAsPrintedAreRejected(t *testing.T) {
	files, _ := filepath.Glob("testdata/spec/*.printed.json")
	if len(files) != 7 {
		t.Fatalf("want the 7 examples of sections 4.3 and 6.1.2, found %d", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(data)
		if f == printedValid {
			if err != nil {
				t.Errorf("%s is valid as printed: %v", f, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: printed example accepted", f)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "parse device-info: line ") {
			t.Errorf("%s: want a parse error with a position, got %v", f, err)
		}
		if strings.ContainsAny(string(data), "\u201c\u201d") && !strings.Contains(msg, "typographic quote") {
			t.Errorf("%s: error does not point at the typographic quote: %v", f, err)
		}
	}
}

func TestSpecExamplesCorrectedValidate(t *testing.T) {
	printed, _ := filepath.Glob("testdata/spec/*.printed.json")
	for _, p := range printed {
		f := strings.TrimSuffix(p, ".printed.json") + ".json"
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("corrected example of %s: %v", p, err)
		}
		info, err := Parse(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if info.Version != "1.1.0" {
			t.Errorf("%s: version %q", f, info.Version)
		}
	}
}

func TestParseErrorPosition(t *testing.T) {
	_, err := Parse([]byte("{\n  \"type\": \"pci\"\n  \"version\": \"1.1.0\"\n}"))
	if err == nil || !strings.Contains(err.Error(), "line 3, column 3") {
		t.Fatalf("want an error at line 3, column 3, got %v", err)
	}
}

func TestValidate(t *testing.T) {
	pci := `"pci": {"pci-address": "0000:01:02.2"}`
	cases := []struct {
		name, json string
		wantErr    []string // substrings; empty means valid
	}{
		{"pci minimal", `{"type":"pci","version":"1.1.0",` + pci + `}`, nil},
		{"pci all keys", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:af:1f.7","pf-pci-address":"0000:af:00.0","vhost-net":"/dev/vhost-net","rdma-device":"mlx5_3","representor-device":"eth3"}}`, nil},
		{"version 1.0.0 read", `{"type":"pci","version":"1.0.0",` + pci + `}`, nil},
		{"version 1.1.9 read", `{"type":"pci","version":"1.1.9",` + pci + `}`, nil},
		{"unknown keys kept valid", `{"type":"pci","version":"1.1.0","x-vendor":1,"pci":{"pci-address":"0000:01:02.2","extra":"y"}}`, nil},
		{"vdpa virtio", `{"type":"vdpa","version":"1.1.0","vdpa":{"parent-device":"vdpa0","driver":"virtio","path":"/sys/bus/virtio/devices/virtio5","pci-address":"0000:65:00.2","pf-pci-address":"0000:65:00.0"}}`, nil},
		{"memif", `{"type":"memif","version":"1.1.0","memif":{"role":"master","path":"/run/memif.sock","mode":"ip"}}`, nil},
		{"memif inject-punt", `{"type":"memif","version":"1.1.0","memif":{"role":"slave","path":"/run/m.sock","mode":"inject-punt"}}`, nil},

		{"no type", `{"version":"1.1.0",` + pci + `}`, []string{"type: is required"}},
		{"bad type", `{"type":"usb","version":"1.1.0"}`, []string{`type: "usb" is not one of`}},
		{"no version", `{"type":"pci",` + pci + `}`, []string{"version: is required"}},
		{"version form", `{"type":"pci","version":"1.1",` + pci + `}`, []string{`version: "1.1" is not MAJOR.MINOR.PATCH`}},
		{"version major 2", `{"type":"pci","version":"2.0.0",` + pci + `}`, []string{`version: "2.0.0" is not supported`}},
		{"version 1.2", `{"type":"pci","version":"1.2.0",` + pci + `}`, []string{`is not supported`}},
		{"missing type map", `{"type":"pci","version":"1.1.0"}`, []string{`pci: is required when type is "pci"`}},
		{"other type map", `{"type":"pci","version":"1.1.0",` + pci + `,"memif":{"role":"master","path":"/a","mode":"ip"}}`, []string{`memif: must not be present when type is "pci"`}},
		{"no pci-address", `{"type":"pci","version":"1.1.0","pci":{}}`, []string{"pci.pci-address: is required"}},
		{"bdf colon", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:02:01:6"}}`, []string{`pci.pci-address: "0000:02:01:6" is not a PCI address in BDF form`}},
		{"bdf short", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"01:02.2"}}`, []string{"BDF form"}},
		{"bdf function 8", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.8"}}`, []string{"BDF form"}},
		{"bdf device 20", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:20.0"}}`, []string{"device number 20 is above 1f"}},
		{"pf bdf", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2","pf-pci-address":"x"}}`, []string{"pci.pf-pci-address"}},
		{"vhost-net relative", `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:01:02.2","vhost-net":"dev/vhost-net"}}`, []string{`pci.vhost-net: "dev/vhost-net" is not an absolute path`}},
		{"vdpa driver", `{"type":"vdpa","version":"1.1.0","vdpa":{"parent-device":"v","driver":"vfio","path":"/dev/x"}}`, []string{`vdpa.driver: "vfio" is not one of vhost, virtio`}},
		{"vdpa missing", `{"type":"vdpa","version":"1.1.0","vdpa":{}}`, []string{"vdpa.parent-device: is required", "vdpa.driver: is required", "vdpa.path: is required"}},
		{"vhost-user mode", `{"type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"both","path":"/a"}}`, []string{`vhost-user.mode: "both" is not one of client, server`}},
		{"vhost-user relative", `{"type":"vhost-user","version":"1.1.0","vhost-user":{"mode":"client","path":"a.sock"}}`, []string{"vhost-user.path"}},
		{"memif role", `{"type":"memif","version":"1.1.0","memif":{"role":"primary","path":"/a","mode":"ip"}}`, []string{`memif.role: "primary"`}},
		{"memif mode", `{"type":"memif","version":"1.1.0","memif":{"role":"master","path":"/a","mode":"l3"}}`, []string{`memif.mode: "l3"`}},
		{"wrong value type", `{"type":"pci","version":1}`, []string{`key "version": number is not a valid string`}},
		{"map is string", `{"type":"pci","version":"1.1.0","pci":"0000:01:02.2"}`, []string{`key "pci"`}},
		{"empty", ``, []string{"empty input"}},
		{"null", `null`, []string{"type: is required"}},
		{"key case", `{"Type":"pci","version":"1.1.0",` + pci + `}`, []string{`Type: keys are case-sensitive: the spec's key is "type"`}},
		{"map key case", `{"type":"pci","version":"1.1.0","pci":{"PCI-Address":"0000:01:02.2"}}`, []string{`pci.PCI-Address: keys are case-sensitive: the spec's key is "pci-address"`}},
		{"map name case", `{"type":"vhost-user","version":"1.1.0","Vhost-User":{"mode":"client","path":"/a"}}`, []string{`Vhost-User: keys are case-sensitive`}},
		{"duplicate key", `{"type":"pci","version":"1.1.0",` + pci + `,"type":"pci"}`, []string{"type: appears twice"}},
		{"duplicate map key", `{"type":"memif","version":"1.1.0","memif":{"role":"master","path":"/a","mode":"ip","mode":"ethernet"}}`, []string{"memif.mode: appears twice"}},
		{"trailing garbage", `{"type":"pci","version":"1.1.0",` + pci + `} x`, []string{"parse device-info"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.json))
			if len(c.wantErr) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want error containing %q, got none", c.wantErr)
			}
			for _, w := range c.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	if err := Validate(nil); err == nil {
		t.Fatal("nil accepted")
	}
}
