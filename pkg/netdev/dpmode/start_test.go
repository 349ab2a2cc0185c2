package dpmode

import (
	"strings"
	"testing"

	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/netdev/source/socket"
	"github.com/devplumb/devplumb/pkg/testenv"
)

func TestRunRejectsBadSources(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		want string
		rcs  []resources.Resource
	}{
		{"not a directory", []resources.Resource{{ResourceName: "example.com/a", VhostUser: &socket.VhostUser{SocketDir: dir + "/missing", Mode: "client"}}}},
		{"bad name glob", []resources.Resource{{ResourceName: "example.com/a", NetDevs: &link.Config{Names: []string{"["}}}}},
		{"bus/pci/devices", []resources.Resource{{ResourceName: "example.com/a", PCI: &pci.Selectors{}}}}, // sysfs root without bus/pci
		{"share the CDI spec file", []resources.Resource{
			{ResourceName: "a.com-b/c", NetDevs: &link.Config{Names: []string{"x"}}},
			{ResourceName: "a.com/b-c", NetDevs: &link.Config{Names: []string{"y"}}},
		}},
	}
	for _, c := range cases {
		cfg := &resources.Config{PluginDir: dir + "/dp", DevInfoDir: dir + "/di", CDIDir: dir + "/cdi", SysfsRoot: dir, Resources: c.rcs}
		if err := Run(t.Context(), cfg, nil, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error containing %q", c.rcs, err, c.want)
		}
	}
	if left := testenv.Files(t, dir); len(left) != 0 {
		t.Errorf("failed starts left files: %v", left)
	}
}

func TestEnvName(t *testing.T) {
	if got := envName("pci", "intel.com/intel_sriov-netdevice"); got != "PCIDEVICE_INTEL_COM_INTEL_SRIOV_NETDEVICE" {
		t.Errorf("envName = %q", got)
	}
}

func TestCDIAnnotationKeyFallsBackToHash(t *testing.T) {
	long := "example.com/" + strings.Repeat("r", 60)
	ann, err := cdiAnnotations(long, []string{"0000:01:00.1"}, []string{"example.com/x=0000:01:00.1"})
	if err != nil || len(ann) != 1 {
		t.Fatalf("%v %v", ann, err)
	}
	for k := range ann {
		if len(k) > len("cdi.k8s.io/")+63 {
			t.Errorf("key %q too long", k)
		}
	}
}
