package devinfo

import (
	"strings"
	"testing"
)

// A PCI address in the file that contradicts the PCI device ID it is filed
// under is reported, for pci and vdpa files; IDs that are no PCI address
// and matching addresses are not.
func TestCheckFiledUnder(t *testing.T) {
	vdpa := &DeviceInfo{Type: TypeVDPA, Vdpa: &VdpaDevice{PciAddress: "0000:01:00.3"}}
	cases := []struct {
		info *DeviceInfo
		id   string
		bad  bool
	}{
		{pciInfo("0000:01:00.1"), "0000:01:00.1", false},
		{pciInfo("0000:01:00.1"), "0000:01:00.2", true},
		{pciInfo("0000:0A:00.1"), "0000:0a:00.1", false},
		{vdpa, "0000:01:00.4", true},
		{vdpa, "vdpa0", false},
		{pciInfo("0000:01:00.1"), "eth0", false},
		{nil, "0000:01:00.1", false},
	}
	for _, tc := range cases {
		err := CheckFiledUnder(tc.info, tc.id)
		if (err != nil) != tc.bad || (err != nil && !strings.Contains(err.Error(), tc.id)) {
			t.Errorf("%+v under %s: %v", tc.info, tc.id, err)
		}
	}
	if id, ok := DeviceIDOfDPName("example.com-vf-0000:01:00.1-device.json"); !ok || id != "0000:01:00.1" {
		t.Errorf("DeviceIDOfDPName: %q %v", id, ok)
	}
	if _, ok := DeviceIDOfDPName("example.com-vhu-port0.sock-device.json"); ok {
		t.Error("a socket name parsed as a PCI address")
	}
}
