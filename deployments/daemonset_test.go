package deployments

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/devplumb/devplumb/pkg/cni/config"
)

// kubeconfigPath is where the devplumb DaemonSet keeps the kubeconfig on the host, and what
// a devplumb config names as "kubeconfig".
const kubeconfigPath = "/etc/cni/net.d/devplumb.d/devplumb.kubeconfig"

// hostPathOf maps a container path to the host path behind it, "" when none is.
func hostPathOf(spec corev1.PodSpec, c corev1.Container, path string) string {
	vols := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			vols[v.Name] = v.HostPath.Path
		}
	}
	for _, m := range c.VolumeMounts {
		if rel, ok := strings.CutPrefix(path, m.MountPath); ok && vols[m.Name] != "" && (rel == "" || rel[0] == '/') {
			return vols[m.Name] + rel
		}
	}
	return ""
}

// TestInstallerDaemonSetMatchesItsScript: the devplumb DaemonSet sets only variables the
// installer reads, runs a mode it has, and its directories land on the host where devplumb
// and the runtime look: /opt/cni/bin and the kubeconfig path.
func TestInstallerDaemonSetMatchesItsScript(t *testing.T) {
	ds := daemonSet(t, decode(t)["devplumb-daemonset.yaml"])
	script, err := os.ReadFile(filepath.Join("..", "images", "devplumb", "install.sh"))
	if err != nil {
		t.Fatal(err)
	}
	c := container(t, ds, "install")
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if !regexp.MustCompile(`\$\{` + e.Name + `[:}]`).Match(script) {
			t.Errorf("env %s is set but install.sh never reads it", e.Name)
		}
	}
	if len(c.Args) != 1 || !strings.Contains(string(script), "\n"+c.Args[0]+")\n") {
		t.Errorf("args %q: install.sh has the modes install and run", c.Args)
	}
	spec := ds.Spec.Template.Spec
	if got := hostPathOf(spec, c, env["CNI_BIN_DIR"]); got != "/opt/cni/bin" {
		t.Errorf("CNI_BIN_DIR %s is %q on the host, want /opt/cni/bin", env["CNI_BIN_DIR"], got)
	}
	if got := hostPathOf(spec, c, env["KUBECONFIG_DIR"]+"/devplumb.kubeconfig"); got != kubeconfigPath {
		t.Errorf("the kubeconfig lands at %q on the host, want %s", got, kubeconfigPath)
	}
	if spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken {
		t.Error("the installer builds the kubeconfig from the service account token: it must be mounted")
	}
}

func container(t *testing.T, ds *appsv1.DaemonSet, name string) corev1.Container {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("DaemonSet %s has no container %q", ds.Name, name)
	return corev1.Container{}
}

// TestMetricsContainerReadsDevplumbState: the devplumb DaemonSet's metrics container
// keeps its spool in the host's state directory, where devplumb (by default) writes,
// and its probe asks the port it listens on.
func TestMetricsContainerReadsDevplumbState(t *testing.T) {
	ds := daemonSet(t, decode(t)["devplumb-daemonset.yaml"])
	c := container(t, ds, "metrics")
	args := map[string]string{}
	for i := 1; i+1 < len(c.Args); i += 2 {
		args[c.Args[i]] = c.Args[i+1]
	}
	if len(c.Command) != 1 || filepath.Base(c.Command[0]) != "devplumbctl" || len(c.Args) == 0 || c.Args[0] != "metrics" {
		t.Fatalf("metrics container runs %q %q", c.Command, c.Args)
	}
	if got := hostPathOf(ds.Spec.Template.Spec, c, args["--state-dir"]); got != config.DefaultStateDir {
		t.Errorf("--state-dir %s is %q on the host, want %s", args["--state-dir"], got, config.DefaultStateDir)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || ":"+p.HTTPGet.Port.String() != args["--listen"] {
		t.Errorf("liveness probe %+v does not ask --listen %s", p, args["--listen"])
	}
}

// TestDaemonSetsHardened: every hostPath says what it expects to find, the root
// filesystem is read-only, the user is explicit, and host namespaces come only with the
// capability that makes them useful.
func TestDaemonSetsHardened(t *testing.T) {
	all := decode(t)
	for _, f := range []string{"devplumb-daemonset.yaml", "netdev-dp-daemonset.yaml"} {
		spec := daemonSet(t, all[f]).Spec.Template.Spec
		for _, v := range spec.Volumes {
			if v.HostPath != nil && (v.HostPath.Type == nil || *v.HostPath.Type == corev1.HostPathUnset) {
				t.Errorf("%s: hostPath volume %s has no type: a missing path would silently become an empty dir", f, v.Name)
			}
		}
		for _, c := range spec.Containers {
			sc := c.SecurityContext
			if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsUser == nil {
				t.Errorf("%s: container %s needs readOnlyRootFilesystem and an explicit runAsUser", f, c.Name)
				continue
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: container %s is privileged", f, c.Name)
			}
			if spec.HostPID && (sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Add, "SYS_PTRACE")) {
				t.Errorf("%s: hostPID without CAP_SYS_PTRACE opens no other pod's /proc/<pid>/ns: drop it", f)
			}
		}
	}
}

// TestNetdevDPDirsAreMountedFromTheHost: each directory netdev-dp is told to use is the
// same path on the host, where the kubelet, devplumb and the runtime look.
func TestNetdevDPDirsAreMountedFromTheHost(t *testing.T) {
	ds := daemonSet(t, decode(t)["netdev-dp-daemonset.yaml"])
	c := ds.Spec.Template.Spec.Containers[0]
	for _, a := range c.Args {
		k, v, ok := strings.Cut(a, "=")
		if !ok || !slices.Contains([]string{"--plugin-dir", "--devinfo-dir", "--cdi-dir"}, k) {
			continue
		}
		if got := hostPathOf(ds.Spec.Template.Spec, c, v); got != v {
			t.Errorf("%s: %s is %q on the host, want the same path", k, v, got)
		}
	}
}

// Example NADs are used through Multus, which replaces the whole network-status list after
// its delegates: an entry devplumb wrote with a kubeconfig would be lost, and an
// unreachable API server would only slow ADD down.
func TestExampleNADsLeaveNetworkStatusToMultus(t *testing.T) {
	for f, objs := range decode(t) {
		for _, o := range objs {
			nad, ok := o.(*nadv1.NetworkAttachmentDefinition)
			if !ok {
				continue
			}
			conf, err := config.Parse([]byte(nad.Spec.Config))
			if err != nil {
				continue // reported by TestNADConfigsAreValidDevplumbConfigs
			}
			if conf.Kubeconfig != "" {
				t.Errorf("%s: NAD %s sets kubeconfig; under Multus it must not (see README: who writes network-status)", f, nad.Name)
			}
		}
	}
}
