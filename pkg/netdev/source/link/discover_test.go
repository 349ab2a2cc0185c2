package link

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// TestDiscoverMovedAfterRestart: a veth that host-device moved into a pod
// before the source started is found there and listed as in use; when the pod
// namespace dies, so does the pair, and the device leaves.
func TestDiscoverMovedAfterRestart(t *testing.T) {
	plugins := testenv.CNIPlugins(t)
	prefix := testenv.VethPair(t, "ndp")
	pod := testenv.NetNS(t)
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"discover","type":"host-device","device":%q}`, prefix+"a")
	cmd := exec.Command(filepath.Join(plugins, "host-device"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID=discover", "CNI_NETNS="+pod.Path(), "CNI_IFNAME=net1", "CNI_PATH="+plugins)
	cmd.Stdin = bytes.NewBufferString(conf)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("host-device ADD: %v: %s", err, out)
	}

	p, _ := New(Config{Names: []string{prefix + "*"}}, "", nil)
	found, err := p.DiscoverMoved(filepath.Dir(pod.Path()))
	if err != nil || !slices.Equal(found, []string{prefix + "a"}) {
		t.Fatalf("DiscoverMoved: %v %v", found, err)
	}
	devs, err := p.Scan()
	if err != nil || len(devs) != 2 || devs[0].ID != prefix+"a" || !devs[0].Healthy {
		t.Fatalf("after discovery: %+v %v", devs, err)
	}

	wait := watched(t, p)
	testenv.RemoveNetNS(t, pod)
	wait("pair gone with the pod namespace", func(d []source.Device) bool { return len(d) == 0 })
}
