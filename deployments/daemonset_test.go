package deployments

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
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

// flagArgs are c's flags after skip leading arguments, by name ("" for a boolean flag).
func flagArgs(t *testing.T, c corev1.Container, skip int) map[string]string {
	t.Helper()
	args := map[string]string{}
	for i := skip; i < len(c.Args); i++ {
		name := c.Args[i]
		if !strings.HasPrefix(name, "--") {
			t.Fatalf("container %s args %q: %q is not a flag", c.Name, c.Args, name)
		}
		if i+1 < len(c.Args) && !strings.HasPrefix(c.Args[i+1], "--") {
			args[name] = c.Args[i+1]
			i++
			continue
		}
		args[name] = ""
	}
	return args
}

// agentArgs are the agent container's flags; it runs devplumb-agent.
func agentArgs(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	if len(c.Command) != 1 || filepath.Base(c.Command[0]) != "devplumb-agent" {
		t.Fatalf("agent container runs %q %q, want devplumb-agent", c.Command, c.Args)
	}
	return flagArgs(t, c, 0)
}

// metricsArgs are the metrics container's flags after devplumbctl metrics.
func metricsArgs(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	if len(c.Command) != 1 || filepath.Base(c.Command[0]) != "devplumbctl" || len(c.Args) == 0 || c.Args[0] != "metrics" {
		t.Fatalf("metrics container runs %q %q, want devplumbctl metrics", c.Command, c.Args)
	}
	return flagArgs(t, c, 1)
}

// TestAgentContainer: the devplumb DaemonSet's agent container serves the entry point's
// socket where the entry point dials (agentproto.DefaultSocket, the same path on the host),
// starts with the installer's kubeconfig, watches the node the pod runs on (NODE_NAME from
// the downward API), on the node's network.
func TestAgentContainer(t *testing.T) {
	ds := daemonSet(t, decode(t)["devplumb-daemonset.yaml"])
	spec := ds.Spec.Template.Spec
	c := container(t, ds, "agent")
	args := agentArgs(t, c)
	if args["--socket"] != agentproto.DefaultSocket {
		t.Errorf("--socket %q, the entry point dials %s", args["--socket"], agentproto.DefaultSocket)
	}
	if dir := filepath.Dir(agentproto.DefaultSocket); hostPathOf(spec, c, dir) != dir {
		t.Errorf("the socket's directory %s is %q on the host, want the same path", dir, hostPathOf(spec, c, dir))
	}
	if got := hostPathOf(spec, c, args["--kubeconfig"]); got != kubeconfigPath {
		t.Errorf("--kubeconfig %q is %q on the host, want the installer's %s, which the configs name", args["--kubeconfig"], got, kubeconfigPath)
	}
	if got := hostPathOf(spec, c, args["--node-config"]); got != nodeconfig.DefaultPath {
		t.Errorf("--node-config %q is %q on the host, want the installer's %s", args["--node-config"], got, nodeconfig.DefaultPath)
	}
	if args["--node-name"] != "$(NODE_NAME)" || !nodeNameFromSpec(c) {
		t.Errorf("--node-name %q, env %+v: want $(NODE_NAME), NODE_NAME from the pod's spec.nodeName", args["--node-name"], c.Env)
	}
	if !spec.HostNetwork {
		t.Error("the agent works before the pod network and its metrics are served on the node's: hostNetwork")
	}
}

// TestMetricsContainer: the metrics container scrapes the agent's metrics socket (the same
// host file), which alone of the host it mounts: a directory of its own, not the agent's
// CNI socket directory (a connect there could prepare and commit any pod's ADD or DEL), not
// devplumb's state (--state-dir "": the agent drains the phase spool, --metrics-state-dir,
// and serves its series). It runs as non-root, the uid and group the agent's socket admits.
// /metrics is secured and its probes reach /healthz on --listen.
func TestMetricsContainer(t *testing.T) {
	ds := daemonSet(t, decode(t)["devplumb-daemonset.yaml"])
	spec := ds.Spec.Template.Spec
	c, agent := container(t, ds, "metrics"), container(t, ds, "agent")
	args, agentFlags := metricsArgs(t, c), agentArgs(t, agent)
	agentSock := agentFlags["--metrics-socket"]
	if args["--agent-metrics"] != agentSock || hostPathOf(spec, c, agentSock) == "" ||
		hostPathOf(spec, c, agentSock) != hostPathOf(spec, agent, agentSock) {
		t.Errorf("--agent-metrics %q: want the agent's --metrics-socket %q, the same host file", args["--agent-metrics"], agentSock)
	}
	sockDir := hostPathOf(spec, agent, filepath.Dir(agentSock))
	if len(c.VolumeMounts) != 1 || hostPathOf(spec, c, c.VolumeMounts[0].MountPath) != sockDir ||
		sockDir == hostPathOf(spec, agent, filepath.Dir(agentproto.DefaultSocket)) {
		t.Errorf("metrics container mounts %+v: want only the agent's metrics socket directory, not its CNI socket's", c.VolumeMounts)
	}
	if got := hostPathOf(spec, c, agentproto.DefaultSocket); got != "" {
		t.Errorf("the agent's CNI socket is %s in the metrics container, want out of its reach", got)
	}
	if dir, ok := args["--state-dir"]; !ok || dir != "" {
		t.Errorf("--state-dir %q: want \"\" (the agent keeps the phase spool)", dir)
	}
	if got := hostPathOf(spec, agent, agentFlags["--metrics-state-dir"]); got != config.DefaultStateDir {
		t.Errorf("agent --metrics-state-dir %q is %q on the host, want %s", agentFlags["--metrics-state-dir"], got, config.DefaultStateDir)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 ||
		sc.RunAsGroup == nil || strconv.FormatInt(*sc.RunAsUser, 10) != agentFlags["--metrics-peer-uid"] ||
		strconv.FormatInt(*sc.RunAsGroup, 10) != agentFlags["--metrics-socket-gid"] {
		t.Errorf("metrics container %+v: want runAsNonRoot, the uid and group of the agent's --metrics-peer-uid %s and --metrics-socket-gid %s",
			sc, agentFlags["--metrics-peer-uid"], agentFlags["--metrics-socket-gid"])
	}
	// The agent has no CAP_CHOWN: it may give its socket only to a group it is in.
	if psc := spec.SecurityContext; psc == nil ||
		!slices.ContainsFunc(psc.SupplementalGroups, func(g int64) bool { return strconv.FormatInt(g, 10) == agentFlags["--metrics-socket-gid"] }) {
		t.Errorf("pod securityContext %+v: want supplementalGroups with the agent's --metrics-socket-gid %s (no CAP_CHOWN: chgrp needs membership)",
			psc, agentFlags["--metrics-socket-gid"])
	}
	if _, ok := args["--secure-metrics"]; !ok {
		t.Errorf("args %q serve /metrics to anyone on the node's network: want --secure-metrics", c.Args)
	}
	for kind, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Path != "/healthz" ||
			":"+p.HTTPGet.Port.String() != args["--listen"] || containerPort(c, p.HTTPGet.Port.String()) == 0 {
			t.Errorf("%s probe %+v: want HTTPS /healthz on --listen %s, a container port", kind, p, args["--listen"])
		}
	}
}

func nodeNameFromSpec(c corev1.Container) bool {
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" {
			return e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
		}
	}
	return false
}

// TestAgentSeesTheHostsPaths: network configs, state records and the libcni cache name host
// paths, which the agent opens as they are: each one is the same path in its container (the
// pods' network namespaces under /run/netns and /var/run/netns, new ones propagated from the
// host), and what it only reads is mounted read-only.
func TestAgentSeesTheHostsPaths(t *testing.T) {
	ds := daemonSet(t, decode(t)["devplumb-daemonset.yaml"])
	spec := ds.Spec.Template.Spec
	c := container(t, ds, "agent")
	for _, p := range []struct {
		path     string
		readOnly bool
	}{
		{config.DefaultStateDir, false}, {config.DefaultStateDir + "/libcni", false},
		{config.DefaultDeviceInfoDir + "/cni", false}, {config.DefaultDeviceInfoDir + "/dp", false},
		{config.DefaultPodResourcesSocket, true}, {kubeconfigPath, true}, {"/opt/cni/bin", true},
		{"/run/netns/cni-1", true}, {"/var/run/netns/cni-1", true},
	} {
		if got := hostPathOf(spec, c, p.path); runPath(got) != runPath(p.path) {
			t.Errorf("%s is %q on the host, want the same path", p.path, got)
		}
		m := mountOf(c, p.path)
		if m == nil {
			continue // reported above
		}
		if m.ReadOnly != p.readOnly {
			t.Errorf("%s is mounted readOnly=%v, want %v", p.path, m.ReadOnly, p.readOnly)
		}
		if strings.Contains(p.path, "/netns/") && (m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer) {
			t.Errorf("%s: a pod's netns made after the agent started is seen only with HostToContainer propagation", p.path)
		}
	}
}

// runPath is p with /var/run as /run, its target on every host.
func runPath(p string) string {
	if rest, ok := strings.CutPrefix(p, "/var/run/"); ok {
		return "/run/" + rest
	}
	return p
}

// mountOf is the mount of c that path lies in (the longest), nil when none.
func mountOf(c corev1.Container, path string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if rel, ok := strings.CutPrefix(path, m.MountPath); ok && (rel == "" || rel[0] == '/') &&
			(best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	return best
}

// TestOnlyTheAgentHasCapabilities: the install and metrics containers have none; the agent
// exactly CAP_DAC_OVERRIDE (docs/security.md says why; e2e/node fails without it). Only
// the metrics container, which writes nothing of the host, runs as non-root.
func TestOnlyTheAgentHasCapabilities(t *testing.T) {
	ds := daemonSet(t, decode(t)["devplumb-daemonset.yaml"])
	want := map[string][]corev1.Capability{"install": nil, "agent": {"DAC_OVERRIDE"}, "metrics": nil}
	if len(ds.Spec.Template.Spec.Containers) != len(want) {
		t.Fatalf("%d containers, want install, agent and metrics", len(ds.Spec.Template.Spec.Containers))
	}
	for name, caps := range want {
		sc := container(t, ds, name).SecurityContext
		if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			!slices.Equal(slices.Sorted(slices.Values(sc.Capabilities.Add)), caps) {
			t.Errorf("container %s: capabilities %+v, want drop ALL, add %v", name, sc, caps)
		}
		if nonRoot := sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot; nonRoot != (name == "metrics") {
			t.Errorf("container %s: runAsNonRoot %v, want it only for metrics", name, nonRoot)
		}
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
// its delegates: an entry devplumb wrote with the node config's kubeconfig would be lost,
// and an unreachable API server would only slow ADD down, so they say "networkStatus": "none". Nor do they carry any other node
// setting (nodeconfig.Keys: host paths, the credential, trustDeviceID): a NAD's author is
// not the node's administrator, and those come from the installer's node config.
func TestExampleNADsLeaveNetworkStatusToMultus(t *testing.T) {
	for f, objs := range decode(t) {
		for _, o := range objs {
			nad, ok := o.(*nadv1.NetworkAttachmentDefinition)
			if !ok {
				continue
			}
			var raw map[string]any
			if err := json.Unmarshal([]byte(nad.Spec.Config), &raw); err != nil {
				t.Errorf("%s: NAD %s: %v", f, nad.Name, err)
			}
			for _, k := range nodeconfig.Keys {
				if _, ok := raw[k]; ok {
					t.Errorf("%s: NAD %s sets %q, a node config setting", f, nad.Name, k)
				}
			}
			conf, err := config.Parse([]byte(nad.Spec.Config), nil)
			if err != nil {
				continue // reported by TestNADConfigsAreValidDevplumbConfigs
			}
			if conf.NetworkStatus != config.NetworkStatusNone {
				t.Errorf(`%s: NAD %s writes network-status; under Multus it must not: "networkStatus": "none" (see deployments/README.md, "Who writes network-status")`, f, nad.Name)
			}
		}
	}
}
