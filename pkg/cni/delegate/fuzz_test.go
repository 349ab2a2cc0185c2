package delegate

import (
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/config"
)

// FuzzBuildList: whatever config Parse accepts, building the delegate
// conflist and the capability arguments neither panics nor loses the device.
func FuzzBuildList(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"devplumb","delegate":{"type":"host-device","name":"d","cniVersion":"0.3.1"}}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"n","type":"devplumb","injectDeviceID":["master","device"],` +
		`"runtimeConfig":{"ips":["10.0.0.1/24"],"deviceID":"x"},"delegates":[{"type":"macvlan","ipam":{}},{"type":"tuning","capabilities":{"mac":true}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data, nil)
		if err != nil {
			return
		}
		list, err := BuildList(c, "0000:01:00.1")
		if err != nil {
			return
		}
		first := pluginMap(t, list.Plugins[0].Bytes)
		if first[PCIBusIDKey] != "0000:01:00.1" {
			t.Fatalf("first delegate lost the device: %v", first)
		}
		if caps := CapabilityArgs(c, "0000:01:00.1", "/f"); caps[CapDeviceID] != "0000:01:00.1" {
			t.Fatalf("capability args %v", caps)
		}
	})
}
