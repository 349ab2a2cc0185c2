package config

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// The cache answers what Parse answers, a copy each time: what one call
// changes in its config, down to a delegate's nested keys, the next does
// not see. The same bytes with another node config are parsed with that
// one; a config that does not parse is refused every time.
func TestCacheParsesAsParse(t *testing.T) {
	var c Cache
	node := &nodeconfig.Node{StateDir: "/tmp/x/state"}
	want, err := Parse([]byte(good), node)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		got, err := c.Parse([]byte(good), node)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("call %d: %+v, %v; want %+v", i, got, err, want)
		}
		got.Delegates[0]["type"] = "changed"
		got.Delegates[0]["capabilities"].(map[string]any)["deviceID"] = false
		got.RuntimeConfig.Raw["portMappings"] = nil
		got.InjectDeviceID[0] = "changed"
		got.Capabilities["deviceID"] = false
	}
	other, err := c.Parse([]byte(good), &nodeconfig.Node{StateDir: "/tmp/y/state"})
	if err != nil || other.StateDir != "/tmp/y/state" {
		t.Errorf("another node config: %+v, %v", other, err)
	}
	withPrev := []byte(`{"cniVersion":"1.0.0","name":"n","type":"devplumb","resourceName":"example.com/net",` +
		`"delegate":{"type":"host-device"},"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}]}}`)
	if conf, err := c.Parse(withPrev, node); err != nil || conf.Name != "n" || c.order.Len() != 2 {
		t.Errorf("a config with a prevResult: %+v, %v; %d configs kept, want it not kept (2)", conf, err, c.order.Len())
	}
	bad := []byte(`{"cniVersion":"1.0.0","name":"n","type":"devplumb","stateDir":"/tmp/x"}`)
	for range 2 {
		if _, err := c.Parse(bad, node); err == nil {
			t.Error("a network config naming stateDir parsed")
		}
	}
}

// At most cacheEntries configs are kept, the least recently used going.
func TestCacheBounded(t *testing.T) {
	var c Cache
	conf := func(i int) []byte {
		return fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"n%d","type":"devplumb","resourceName":"example.com/net",`+
			`"delegate":{"type":"host-device"}}`, i)
	}
	for i := range cacheEntries + 10 {
		if _, err := c.Parse(conf(i), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Parse(conf(0), nil); err != nil { // kept in use
			t.Fatal(err)
		}
	}
	if n := c.order.Len(); n != cacheEntries || len(c.entries) != cacheEntries {
		t.Errorf("%d configs kept (%d in the index), want %d", n, len(c.entries), cacheEntries)
	}
	if c.get(cacheKey{node: *nodeconfig.Defaults(), data: string(conf(0))}) == nil {
		t.Error("the config used on every call went")
	}
	if c.get(cacheKey{node: *nodeconfig.Defaults(), data: string(conf(1))}) != nil {
		t.Error("the least recently used config stayed")
	}
}
