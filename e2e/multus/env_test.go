package multus_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// env is one test's node: binaries, a PodResources server, the device-info directory and
// Multus's config, all under a temp dir.
type env struct {
	t            *testing.T
	dir          string
	binDir       string
	multusBin    string
	multusConf   []byte
	multusLog    string
	npwgDir      string // mounted at /var/run/k8s.cni.cncf.io for Multus
	podResources *podresourcestest.Server
	// nodeConfig is devplumb's node config (createNAD writes it), named in
	// Multus's environment.
	nodeConfig string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testenv.HoldHostPaths(t) // it makes mount points on the host's kubelet and NAD client paths
	mb, err := multusBin()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: t.TempDir(), multusBin: mb}
	testenv.CNIPlugins(t)
	e.binDir = testenv.Build(t, "./cmd/devplumb", "github.com/containernetworking/plugins/plugins/main/loopback")
	e.npwgDir = filepath.Join(e.dir, "k8s.cni.cncf.io")
	for _, d := range []string{filepath.Join(e.npwgDir, "devinfo", "dp"), filepath.Join(e.npwgDir, "devinfo", "cni")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"/var/lib/kubelet/pod-resources", "/var/run/k8s.cni.cncf.io"} {
		mountPoint(t, d)
	}
	e.podResources = podresourcestest.NewServer(t, podresourcestest.WithoutRateLimit())
	e.multusLog = filepath.Join(e.dir, "multus.log")
	conf := map[string]any{
		"cniVersion": "1.0.0", "name": "multus-cni-network", "type": "multus",
		"kubeconfig": srv.Kubeconfig, "binDir": e.binDir,
		"cniDir": filepath.Join(e.dir, "multus"), "confDir": filepath.Join(e.dir, "net.d"),
		"logFile": e.multusLog, "logLevel": "debug",
		// The cluster network stands in for the pod's primary network; loopback has no
		// side effects on the host.
		"delegates": []any{map[string]any{"cniVersion": "1.0.0", "name": "cluster-default", "type": "loopback"}},
	}
	if e.multusConf, err = json.Marshal(conf); err != nil {
		t.Fatal(err)
	}
	return e
}

// mountPoint makes sure dir exists on the host to mount over (Multus hard-codes it), and
// removes it afterwards if this test created it and it is still empty.
func mountPoint(t *testing.T, dir string) {
	t.Helper()
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range created {
			_ = os.Remove(d) // fails, harmlessly, if someone put something there
		}
	})
}

// hostNetdev creates a veth pair in the host namespace; one end stands in for a VF's netdev
// (this machine has no SR-IOV NIC) and the test's device plugin reports it by name.
func (e *env) hostNetdev() string {
	return testenv.VethPair(e.t, "dpm") + "a"
}

// writeDP writes the device plugin's device-info file for dev, as netdev-dp would.
func (e *env) writeDP(dev string, info *nadv1.DeviceInfo) {
	b, err := json.Marshal(info)
	if err != nil {
		e.t.Fatal(err)
	}
	name := strings.ReplaceAll(resourceName, "/", "-") + "-" + dev + "-device.json"
	if err := os.WriteFile(filepath.Join(e.npwgDir, "devinfo", "dp", name), b, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// cniDeviceInfoFile is where Multus puts the attachment's CNI device-info file (as seen
// from the host, through the test's directory): "<namespace>-<NAD>-<containerID>_<ifName>".
func (e *env) cniDeviceInfoFile(namespace, nad, ifName string) string {
	return filepath.Join(e.npwgDir, "devinfo", "cni", namespace+"-"+nad+"-"+containerID+"_"+ifName)
}
