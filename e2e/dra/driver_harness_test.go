package dra_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/netdev/dramode"
	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/netdev/source/socket"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// The resources of the shipped example config (deployments/dra), whose DeviceClasses
// the tests allocate with.
const (
	drvResVF    = "example.com/sriov_vf"
	drvResVhost = "example.com/vhostuser"
	drvDriver   = dramode.DefaultDriverName
)

// netdevDPUser is the DRA DaemonSet's service account: the driver runs as it (through
// impersonation by the test's admin), so the shipped RBAC is what it gets.
const netdevDPUser = "system:serviceaccount:kube-system:netdev-dp"

// serviceAccountNodeKey is the user extra in which the API server names the node of a
// service account token bound to a pod (k8s.io/apiserver's serviceaccount.NodeNameKey).
const serviceAccountNodeKey = "authentication.kubernetes.io/node-name"

// driverNode is one node for netdev-dp in DRA mode: its Node object, a fake sysfs with
// four VFs of PF ens1f0, two vhost-user sockets, and the kubelet's directories.
type driverNode struct {
	t                                      *testing.T
	name                                   string
	dir, sysfs, sockDir                    string
	registrar, plugins, devinfoDir, cdiDir string
	config, kubeconfig                     string
	bin                                    string
	proc                                   *kubeapi.Proc
	runs                                   int
}

// newDriverNode makes the node; extra resources join the config's VFs and sockets.
func newDriverNode(t *testing.T, extra ...resources.Resource) *driverNode {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	n := &driverNode{t: t, name: "dra-node-" + hex.EncodeToString(b), dir: t.TempDir()}
	for p, sub := range map[*string]string{&n.sysfs: "sys", &n.sockDir: "vhu", &n.registrar: "plugins_registry",
		&n.plugins: "plugins", &n.devinfoDir: "devinfo", &n.cdiDir: "cdi"} {
		*p = filepath.Join(n.dir, sub)
		e2etest.Must(t, os.MkdirAll(*p, 0o755))
	}
	sysfstest.AddPCI(t, n.sysfs, sysfstest.PCI{Addr: "0000:01:00.0", Vendor: "8086", Device: "1592", Class: "020000", Driver: "ice", NumVFs: 4, Net: []string{"ens1f0"}})
	for i := range 4 {
		sysfstest.AddPCI(t, n.sysfs, sysfstest.PCI{Addr: fmt.Sprintf("0000:01:01.%d", i), Vendor: "8086", Device: "1889",
			Class: "020000", Driver: "iavf", NUMA: i / 2, PF: "0000:01:00.0", Net: []string{fmt.Sprintf("ens1f0v%d", i)}})
	}
	for _, s := range []string{"vhu0.sock", "vhu1.sock"} {
		n.listen(s)
	}
	cfg := resources.Config{Resources: []resources.Resource{
		{ResourceName: drvResVF, PCI: &pci.Selectors{PFNames: []string{"ens1f0"}}},
		{ResourceName: drvResVhost, VhostUser: &socket.VhostUser{SocketDir: n.sockDir, Mode: "client"}},
	}}
	cfg.Resources = append(cfg.Resources, extra...)
	data, err := json.Marshal(cfg)
	e2etest.Must(t, err)
	n.config = filepath.Join(n.dir, "config.json")
	e2etest.Must(t, os.WriteFile(n.config, data, 0o644))
	n.kubeconfig = filepath.Join(n.dir, "netdev-dp.kubeconfig")
	e2etest.Must(t, os.WriteFile(n.kubeconfig, []byte(drvKubeconfig(srv.URL, srv.Token, netdevDPUser, n.name)), 0o600))
	_, err = srv.Client.CoreV1().Nodes().Create(e2etest.Ctx(t), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{})
	e2etest.Must(t, err)
	t.Cleanup(n.cleanupAPI)
	n.bin = filepath.Join(testenv.Build(t, "./cmd/netdev-dp"), "netdev-dp")
	applyDRADeployment(t)
	return n
}

func (n *driverNode) listen(name string) net.Listener {
	n.t.Helper()
	l, err := net.Listen("unix", filepath.Join(n.sockDir, name))
	e2etest.Must(n.t, err)
	n.t.Cleanup(func() { l.Close() })
	return l
}

// cleanupAPI removes the node's objects: no garbage collector runs in the test cluster.
func (n *driverNode) cleanupAPI() {
	c := context.Background()
	_ = srv.Client.ResourceV1().ResourceSlices().DeleteCollection(c, metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.name})
	_ = srv.Client.CoreV1().Nodes().Delete(c, n.name, metav1.DeleteOptions{})
}

// start runs netdev-dp --mode dra (with extra flags) as a process and waits until it
// answers the kubelet's registration call.
func (n *driverNode) start(extra ...string) {
	n.t.Helper()
	n.runs++
	p, err := kubeapi.Spawn(n.dir, fmt.Sprintf("netdev-dp-%d", n.runs), n.bin, append([]string{"--mode=dra", "--config=" + n.config,
		"--node-name=" + n.name, "--kubeconfig=" + n.kubeconfig, "--sysfs-root=" + n.sysfs,
		"--devinfo-dir=" + n.devinfoDir, "--cdi-dir=" + n.cdiDir,
		"--kubelet-registrar-dir=" + n.registrar, "--kubelet-plugins-dir=" + n.plugins, "--log-level=debug"}, extra...)...)
	e2etest.Must(n.t, err)
	n.proc = p
	n.t.Cleanup(func() {
		p.Terminate(10 * time.Second)
		if n.t.Failed() {
			log, _ := os.ReadFile(filepath.Join(n.dir, fmt.Sprintf("netdev-dp-%d.log", n.runs)))
			n.t.Logf("netdev-dp log:\n%s", log)
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := n.registrationInfo(); err == nil {
			return
		} else if time.Now().After(deadline) {
			n.t.Fatalf("netdev-dp does not answer GetInfo: %v; log:\n%s", err, n.log())
		}
		if exited, perr := p.Exited(); exited {
			n.t.Fatalf("netdev-dp exited: %v; log:\n%s", perr, n.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *driverNode) log() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, fmt.Sprintf("netdev-dp-%d.log", n.runs)))
	return string(b)
}

func drvDial(t testing.TB, socket string) *grpc.ClientConn {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// registrationInfo is the kubelet's GetInfo call on the registration socket.
func (n *driverNode) registrationInfo() (*registerapi.PluginInfo, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(n.registrar, drvDriver+"-reg.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return registerapi.NewRegistrationClient(conn).GetInfo(c, &registerapi.InfoRequest{})
}

// draClient is the kubelet's DRA client on the endpoint the registration names.
func (n *driverNode) draClient() drapb.DRAPluginClient {
	info, err := n.registrationInfo()
	e2etest.Must(n.t, err)
	return drapb.NewDRAPluginClient(drvDial(n.t, info.Endpoint))
}

// slices are the driver's ResourceSlices of this node.
func (n *driverNode) slices(c context.Context) ([]resourceapi.ResourceSlice, error) {
	l, err := srv.Client.ResourceV1().ResourceSlices().List(c, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + n.name + ",spec.driver=" + drvDriver})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// waitDevices waits until the node's published devices satisfy cond and returns them
// by name.
func (n *driverNode) waitDevices(what string, cond func(map[string]resourceapi.Device) bool) map[string]resourceapi.Device {
	n.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := map[string]resourceapi.Device{}
		items, err := n.slices(e2etest.Ctx(n.t))
		e2etest.Must(n.t, err)
		for _, s := range items {
			for _, d := range s.Spec.Devices {
				got[d.Name] = d
			}
		}
		if len(items) > 0 && cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: slices hold %d devices %v; log:\n%s", what, len(got), got, n.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// drvKubeconfig is the test server's admin kubeconfig acting as user, in the service
// accounts' groups, and, unless node is "", with the node a token bound to the DaemonSet's
// pod on that node carries (deployments/dra/node-policy.yaml lets it write only that node's
// slices).
func drvKubeconfig(server, token, user, node string) string {
	cfg, err := clientcmd.Load([]byte(kubeapi.Kubeconfig(server, token)))
	if err != nil {
		panic(err) // kubeapi.Kubeconfig's own output
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
		a.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}
		if node != "" {
			a.ImpersonateUserExtra = map[string][]string{serviceAccountNodeKey: {node}}
		}
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		panic(err)
	}
	return string(out)
}

// applyDRADeployment creates the objects of deployments/dra (the RBAC, the DeviceClasses,
// the DaemonSet that no controller runs here) as kubectl apply would, and waits until the
// RBAC authorizer grants the driver's identity what it needs.
func applyDRADeployment(t *testing.T) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(testenv.ModuleRoot(), "deployments", "dra", "*.yaml"))
	e2etest.Must(t, err)
	// kustomization.yaml is kustomize's Component, not an object.
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "kustomization.yaml" })
	if len(files) == 0 {
		t.Fatal("no deployments/dra/*.yaml")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		e2etest.Must(t, err)
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			e2etest.Must(t, err)
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := drvCreate(e2etest.Ctx(t), obj); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("%s: create %T: %v", f, obj, err)
			}
		}
	}
	as := drvClientFor(t, drvKubeconfig(srv.URL, srv.Token, netdevDPUser, ""))
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := as.ResourceV1().ResourceSlices().List(e2etest.Ctx(t), metav1.ListOptions{Limit: 1})
		if err == nil {
			// The driver really runs as that account: what the RBAC does not grant is refused.
			if _, err := as.CoreV1().Secrets("kube-system").List(e2etest.Ctx(t), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				t.Fatalf("%s lists secrets: %v, want Forbidden", netdevDPUser, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shipped RBAC does not let %s list ResourceSlices: %v", netdevDPUser, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func drvCreate(c context.Context, obj runtime.Object) error {
	k := srv.Client
	o := metav1.CreateOptions{}
	var err error
	switch v := obj.(type) {
	case *corev1.ConfigMap:
		_, err = k.CoreV1().ConfigMaps(v.Namespace).Create(c, v, o)
	case *corev1.ServiceAccount:
		_, err = k.CoreV1().ServiceAccounts(v.Namespace).Create(c, v, o)
	case *rbacv1.ClusterRole:
		_, err = k.RbacV1().ClusterRoles().Create(c, v, o)
	case *rbacv1.ClusterRoleBinding:
		_, err = k.RbacV1().ClusterRoleBindings().Create(c, v, o)
	case *appsv1.DaemonSet:
		_, err = k.AppsV1().DaemonSets(v.Namespace).Create(c, v, o)
	case *resourceapi.DeviceClass:
		_, err = k.ResourceV1().DeviceClasses().Create(c, v, o)
	case *admissionv1.ValidatingAdmissionPolicy:
		_, err = k.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(c, v, o)
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		_, err = k.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(c, v, o)
	default:
		err = fmt.Errorf("unexpected object %T", obj)
	}
	return err
}

func drvClientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	e2etest.Must(t, err)
	c, err := kubernetes.NewForConfig(cfg)
	e2etest.Must(t, err)
	return c
}
