package resources

import (
	"testing"
)

// FuzzParseConfig: no config panics; an accepted one has resources, each
// with one source and a name given once.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"resyncInterval":"2s","resources":[{"resourceName":"example.com/vf","pci":{"vendors":["8086"],"pfNames":["ens1f0"]}},` +
		`{"resourceName":"example.com/netdev","netdevs":{"names":["eth*"]}},` +
		`{"resourceName":"example.com/vhu","vhostUser":{"socketDir":"/run/vhu","mode":"client"}},` +
		`{"resourceName":"example.com/memif","memif":{"socketDir":"/run/memif","role":"slave","mode":"ip"}},` +
		`{"resourceName":"example.com/vdpa","vdpa":{"drivers":["vhost"]}}]}`))
	f.Add([]byte(`{"resources":[]}`))
	f.Add([]byte(`{"resources":[{"resourceName":"example.com/a","netdevs":{"names":["x"]}}]} {}`))
	f.Add([]byte(`{"resyncInterval":"-1s","resources":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			return
		}
		if len(c.Resources) == 0 {
			t.Fatal("accepted a config without resources")
		}
		seen := map[string]bool{}
		for _, r := range c.Resources {
			if seen[r.ResourceName] {
				t.Fatalf("resource %s accepted twice", r.ResourceName)
			}
			seen[r.ResourceName] = true
			n := 0
			for _, set := range []bool{r.PCI != nil, r.NetDevs != nil, r.VDPA != nil, r.VhostUser != nil, r.Memif != nil} {
				if set {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("resource %s accepted with %d sources", r.ResourceName, n)
			}
		}
		if c.Resync.Duration < 0 {
			t.Fatalf("negative resync %v", c.Resync)
		}
	})
}
