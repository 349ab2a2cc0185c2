package agent

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/cni/phasespool"
	"github.com/devplumb/devplumb/pkg/cni/plugin/plugintest"
	"github.com/devplumb/devplumb/podresources"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// BenchmarkAddDel is the agent's own work for one ADD and its DEL (prepare
// and commit of each, no socket, the delegates' result given): what every
// pod's attachment costs the node's CPU besides the delegates (issue 38).
// -benchmem's allocations do not depend on the machine's load. The
// kubelet's rate limit (100 QPS) and the agent's share of it are off: a
// loop of ADDs would wait for them, and nothing else would be measured.
func BenchmarkAddDel(b *testing.B) {
	n := plugintest.NewNode(b, 1, podresourcestest.WithoutRateLimit())
	conf := n.Conf(map[string]any{"type": "host-device"})
	conf["deviceInfoDir"] = tmpfsDevInfo(b, n)
	data := nodeconfigtest.SplitEnv(b, conf)
	phases := map[string]time.Duration{}
	a := New(Config{Build: "bench", Log: quiet(), Timeout: 5 * time.Second, Phases: func(r phasespool.Record) {
		for _, ph := range r.Phases {
			phases[r.Op+" "+ph.Name] += ph.Duration
		}
	}})
	b.Cleanup(a.Close)
	a.kubelet.dial = func(socket string, opts ...podresources.Option) (*podresources.Client, error) {
		return podresources.New(socket, append(opts, podresources.WithRateLimit(math.Inf(1), 1))...)
	}
	ctx := context.Background()
	result := []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"net1","mac":"02:00:00:00:00:01","sandbox":"` + n.Pod.Path() +
		`"}],"ips":[{"address":"192.0.2.7/24","interface":0}]}`)
	p := agentproto.Prepare{ContainerID: "c1", Netns: n.Pod.Path(), IfName: "net1", Path: n.CNIPath,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=u1", StdinData: data}
	for b.Loop() {
		for _, cmd := range []string{agentproto.CmdAdd, agentproto.CmdDel} {
			p.Command = cmd
			ans, err := a.Prepare(ctx, &p)
			if err != nil || ans.Error != nil || ans.Delegate == nil {
				b.Fatalf("prepare %s: %+v, %v", cmd, ans, err)
			}
			c := &agentproto.Commit{Attachment: ans.Attachment}
			if cmd == agentproto.CmdAdd {
				c.Result = result
			}
			if out, err := a.Commit(ctx, c); err != nil || out.Error != nil {
				b.Fatalf("commit %s: %+v, %v", cmd, out, err)
			}
		}
	}
	for name, d := range phases {
		b.ReportMetric(float64(d.Microseconds())/float64(b.N), strings.ReplaceAll(name, " ", "-")+"-µs/op")
	}
}

// tmpfsDevInfo is a device-info directory on tmpfs, as a node's /var/run is (the CNI
// device-info file's fsyncs cost nothing there, and a millisecond on ext4), with the
// device plugin's file of n's device.
func tmpfsDevInfo(b *testing.B, n *plugintest.Node) string {
	dir, err := os.MkdirTemp("/dev/shm", "devplumb-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	info := &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version, Pci: &devinfo.PciDevice{PciAddress: "0000:01:00.0"}}
	if err := devinfo.NewStore(dir).WriteDP(plugintest.Resource, n.Devs[0], info); err != nil {
		b.Fatal(err)
	}
	return dir
}
