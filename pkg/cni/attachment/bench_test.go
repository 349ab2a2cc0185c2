package attachment

import (
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkTakeRelease: one ADD's and one DEL's state work when the ADD's
// first candidate is free (it reads the records once, in Take: a holder
// before every free candidate makes it read them again, to ask the kubelet
// about the holders; see Request.AskFirst), on a node that already holds 0,
// 110 (a full node, one attachment a pod) and 220 attachments, each record
// the size a completed ADD writes.
func BenchmarkTakeRelease(b *testing.B) {
	for _, n := range []int{0, 110, 220} {
		b.Run(fmt.Sprintf("held-%d", n), func(b *testing.B) {
			s := New(b.TempDir())
			for i := range n {
				r := req(fmt.Sprintf("p%d", i), fmt.Sprintf("%064x", i), "net1", fmt.Sprintf("d%d", i))
				r.Fill = completed
				if _, err := s.Take(r); err != nil {
					b.Fatal(err)
				}
			}
			r := req("bench", "cb", "net1", "free")
			for b.Loop() {
				if _, err := s.Take(r); err != nil {
					b.Fatal(err)
				}
				if err := s.Release(r.Key); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// completed fills a record as a completed SR-IOV ADD leaves it.
func completed(a *Record) error {
	a.Delegate = json.RawMessage(`{"cniVersion":"1.0.0","name":"sriov-net-a","plugins":[{"type":"sriov","vlan":100,"spoofchk":"on",` +
		`"trust":"off","deviceID":"0000:3b:02.1","ipam":{"type":"host-local","ranges":[[{"subnet":"192.0.2.0/24",` +
		`"rangeStart":"192.0.2.10","rangeEnd":"192.0.2.200"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`)
	a.Result = json.RawMessage(`{"cniVersion":"1.0.0","interfaces":[{"name":"net1","mac":"02:00:00:00:00:01",` +
		`"sandbox":"/var/run/netns/cni-1234"}],"ips":[{"address":"192.0.2.7/24","interface":0,"gateway":"192.0.2.1"}],` +
		`"routes":[{"dst":"0.0.0.0/0","gw":"192.0.2.1"}],"dns":{}}`)
	a.NetNS, a.Complete = "/var/run/netns/cni-1234", true
	a.CapabilityArgs = map[string]any{"deviceID": a.DeviceID, "CNIDeviceInfoFile": "/var/run/k8s.cni.cncf.io/devinfo/cni/" + a.ContainerID}
	a.Phases = []Phase{{"config", 1}, {"podResources", 2}, {"claim", 3}, {"deviceInfo", 4}, {"delegate", 5}, {"state", 6}}
	return nil
}
