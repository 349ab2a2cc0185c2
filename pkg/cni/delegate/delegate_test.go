package delegate

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/devplumb/devplumb/pkg/cni/config"
)

func parse(t *testing.T, s string) *config.NetConf {
	t.Helper()
	c, err := config.Parse([]byte(s), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pluginMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestBuildListInjectsDevice(t *testing.T) {
	c := parse(t, `{"cniVersion":"0.4.0","name":"n","type":"devplumb","injectDeviceID":["deviceID","device"],
	  "delegates":[{"type":"host-device"},{"type":"tuning","cniVersion":"1.0.0"}]}`)
	list, err := BuildList(c, "0000:01:02.3")
	if err != nil {
		t.Fatal(err)
	}
	if list.Name != "n" || list.CNIVersion != "0.4.0" || len(list.Plugins) != 2 {
		t.Fatalf("list: %+v", list)
	}
	first, second := pluginMap(t, list.Plugins[0].Bytes), pluginMap(t, list.Plugins[1].Bytes)
	for _, k := range []string{"deviceID", "device", "pciBusID"} {
		if first[k] != "0000:01:02.3" {
			t.Errorf("first plugin: %s = %v", k, first[k])
		}
		if second[k] != nil {
			t.Errorf("later plugins get no keys (as with Multus): %s = %v", k, second[k])
		}
	}
	if _, ok := c.Delegates[0]["deviceID"]; ok {
		t.Error("BuildList must not modify the parsed config")
	}
}

func TestBuildListNonPCIAndInheritance(t *testing.T) {
	c := parse(t, `{"cniVersion":"1.0.0","name":"n","type":"devplumb",
	  "delegate":{"type":"macvlan","name":"inner","cniVersion":"0.3.1"}}`)
	list, err := BuildList(c, "eth7")
	if err != nil {
		t.Fatal(err)
	}
	if list.Name != "inner" || list.CNIVersion != "0.3.1" {
		t.Errorf("lone delegate keeps its own name/version: %+v", list)
	}
	m := pluginMap(t, list.Plugins[0].Bytes)
	if m["deviceID"] != "eth7" || m["pciBusID"] != nil {
		t.Errorf("non-PCI device: %v", m)
	}
	empty, _ := BuildList(c, "")
	if pluginMap(t, empty.Plugins[0].Bytes)["deviceID"] != nil {
		t.Error("no device, nothing injected")
	}
}

func TestCapabilityArgs(t *testing.T) {
	c := parse(t, `{"cniVersion":"1.0.0","name":"n","type":"devplumb","runtimeConfig":{"mac":"02:00:00:00:00:01"},
	  "delegate":{"type":"macvlan"}}`)
	got := CapabilityArgs(c, "eth7", "/x/cni/f")
	want := map[string]any{"mac": "02:00:00:00:00:01", "deviceID": "eth7", "CNIDeviceInfoFile": "/x/cni/f"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("caps %v, want %v", got, want)
	}
	if IsPCIAddress("0000:01:02") || !IsPCIAddress("0000:af:00.7") {
		t.Error("IsPCIAddress")
	}
}

// A share's first delegate gets the parent's netdev as its master and no
// device ID keys; the chain and the config stay as they were.
func TestBuildShareList(t *testing.T) {
	c := parse(t, `{"cniVersion":"1.0.0","name":"n","type":"devplumb",
	  "delegates":[{"type":"macvlan","mode":"bridge","ipam":{"type":"static"}},{"type":"tuning"}]}`)
	list, err := BuildShareList(c, "ens1f0")
	if err != nil {
		t.Fatal(err)
	}
	if list.Name != "n" || list.CNIVersion != "1.0.0" || len(list.Plugins) != 2 {
		t.Fatalf("list: %+v", list)
	}
	first, second := pluginMap(t, list.Plugins[0].Bytes), pluginMap(t, list.Plugins[1].Bytes)
	if first["master"] != "ens1f0" || first["deviceID"] != nil || first["mode"] != "bridge" || second["master"] != nil {
		t.Errorf("plugins %v, %v", first, second)
	}
	if _, ok := c.Delegates[0]["master"]; ok {
		t.Error("BuildShareList must not modify the parsed config")
	}
}
