package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// FuzzParse: no input panics, and an accepted config never carries a name,
// device or path that could lead devplumb out of its directories.
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(`{"cniVersion":"0.3.1","name":"n","type":"devplumb","deviceID":"eth0","delegates":[{"type":"macvlan"}]}`))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"../x","type":"devplumb","delegate":{"type":"x"}}`))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"devplumb",` +
		`"runtimeConfig":{"CNIDeviceInfoFile":"/d/cni/x"},"delegate":{"type":"x"}}`))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","type":"devplumb","kubeconfig":"/tmp/k","delegate":{"type":"x"}}`))
	node := &nodeconfig.Node{DeviceInfoDir: "/d", StateDir: "/s", PodResourcesSocket: "/p.sock"}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, node)
		if err != nil {
			return
		}
		// Only the node config names a credential or switches a check off.
		if c.Kubeconfig != "" || c.TrustDeviceID || c.LogFile != "" || c.StateDir != "/s" {
			t.Fatalf("a network config set a node setting: %+v", c.Node)
		}
		for _, s := range []string{c.Name, c.ResourceName, c.DeviceID, c.RuntimeConfig.DeviceID} {
			if strings.Contains(s, "..") {
				t.Fatalf("accepted %q", s)
			}
		}
		if strings.Contains(c.Name, "/") || strings.Contains(c.DeviceIDFromConfig(), "/") {
			t.Fatalf("accepted a slash: %q %q", c.Name, c.DeviceIDFromConfig())
		}
		for _, p := range []string{c.StateDir, c.DeviceInfoDir, c.PodResourcesSocket} {
			if !filepath.IsAbs(p) || strings.Contains(p+"/", "/../") || strings.Contains(p+"/", "/./") {
				t.Fatalf("accepted path %q", p)
			}
		}
		if f := c.RuntimeConfig.CNIDeviceInfoFile; f != "" && !slices.Contains(c.CNIDeviceInfoDirs(), filepath.Dir(f)) {
			t.Fatalf("accepted CNIDeviceInfoFile %q outside %v", f, c.CNIDeviceInfoDirs())
		}
		if len(c.Delegates) == 0 {
			t.Fatal("accepted a config without delegates")
		}
	})
}
