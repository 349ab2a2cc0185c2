package plugin

import (
	"encoding/json"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// Later in a chain, devplumb keeps what earlier plugins reported and
// appends its delegates' result with the IP indexes moved along.
func TestWithPrev(t *testing.T) {
	stdin := []byte(`{"cniVersion":"1.0.0","prevResult":{"cniVersion":"1.0.0",
		"interfaces":[{"name":"eth0","sandbox":"/ns"}],"ips":[{"address":"10.0.0.2/24","interface":0}],
		"dns":{"nameservers":["10.0.0.10"]}}}`)
	prev, err := prevResult(stdin, "1.0.0")
	if err != nil || prev == nil {
		t.Fatalf("prevResult: %v %v", prev, err)
	}
	var res current.Result
	if err := json.Unmarshal([]byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"net1","sandbox":"/ns"}],
		"ips":[{"address":"192.0.2.7/24","interface":0}],"routes":[{"dst":"198.51.100.0/24"}]}`), &res); err != nil {
		t.Fatal(err)
	}
	res.CNIVersion = "1.0.0"
	merged, err := withPrev(prev, &res)
	if err != nil {
		t.Fatal(err)
	}
	m := merged.(*current.Result)
	if len(m.Interfaces) != 2 || m.Interfaces[1].Name != "net1" || len(m.IPs) != 2 || *m.IPs[0].Interface != 0 ||
		*m.IPs[1].Interface != 1 || len(m.Routes) != 1 || m.DNS.Nameservers[0] != "10.0.0.10" {
		out, _ := json.Marshal(m)
		t.Errorf("merged %s", out)
	}
	if *res.IPs[0].Interface != 0 || len(prev.Interfaces) != 1 {
		t.Error("withPrev changed its inputs")
	}
	if p, err := prevResult([]byte(`{"cniVersion":"1.0.0"}`), "1.0.0"); p != nil || err != nil {
		t.Errorf("no prevResult: %v %v", p, err)
	}
	if _, err := prevResult([]byte(`{"prevResult":5}`), "1.0.0"); err == nil || !strings.Contains(err.Error(), `"prevResult"`) {
		t.Errorf("bad prevResult: %v", err)
	}
}
