package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/attachment"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// agentEnv is a node whose pod p1 holds veth ends as devices of example.com/vf
// (DP device-info files, a real PodResources server), an agent serving on a
// real socket, and the real host-device plugin with host-local IPAM as the
// delegate, which moves each device into the pod's real netns. The API server
// is a stand-in recording network-status writes.
type agentEnv struct {
	t       *testing.T
	agent   *Agent
	socket  string
	cniPath string
	root    string
	pod     ns.NetNS
	devs    []string
	conf    map[string]any
	kube    *statusKube
	builds  atomic.Int32 // Kubernetes clients built
	dials   atomic.Int32 // PodResources clients made
}

func newAgentEnv(t *testing.T, devices int, cfg Config) *agentEnv {
	e := &agentEnv{t: t, cniPath: testenv.CNIPlugins(t), root: t.TempDir(), pod: testenv.NetNS(t), kube: &statusKube{}}
	store := devinfo.NewStore(filepath.Join(e.root, "devinfo"))
	for i := range devices {
		dev := testenv.VethPair(t, "dpa") + "a"
		info := &devinfo.DeviceInfo{Type: devinfo.TypePCI, Version: devinfo.Version,
			Pci: &devinfo.PciDevice{PciAddress: fmt.Sprintf("0000:01:%02x.0", i)}}
		if err := store.WriteDP("example.com/vf", dev, info); err != nil {
			t.Fatal(err)
		}
		e.devs = append(e.devs, dev)
	}
	pr := podresourcestest.NewServer(t)
	pr.SetPod(&v1.PodResources{Namespace: "default", Name: "p1", Containers: []*v1.ContainerResources{{
		Name: "app", Devices: []*v1.ContainerDevices{{ResourceName: "example.com/vf", DeviceIds: e.devs}},
	}}})
	kubeconfig := filepath.Join(e.root, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("stand-in\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.conf = map[string]any{"cniVersion": "1.0.0", "name": "fast-net", "type": "devplumb", "resourceName": "example.com/vf",
		"podResourcesSocket": pr.Socket, "deviceInfoDir": store.Dir, "stateDir": filepath.Join(e.root, "state"),
		"kubeconfig": kubeconfig, "events": "none", "injectDeviceID": []string{"device"},
		"delegate": map[string]any{"type": "host-device", "ipam": map[string]any{"type": "host-local",
			"ranges": [][]map[string]string{{{"subnet": "192.0.2.0/24"}}}, "dataDir": filepath.Join(e.root, "ipam")}}}
	e.start(cfg)
	return e
}

// start runs the agent on a socket of its own until the test ends.
func (e *agentEnv) start(cfg Config) {
	t := e.t
	cfg.Build, cfg.Log = "agent-test", quiet()
	if cfg.NewKube == nil {
		cfg.NewKube = e.newKube
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	e.agent = New(cfg)
	dial := e.agent.kubelet.dial
	e.agent.kubelet.dial = func(socket string, opts ...podresources.Option) (*podresources.Client, error) {
		e.dials.Add(1)
		return dial(socket, opts...)
	}
	dir, err := os.MkdirTemp("", "agent") // t.TempDir() may be too long for a socket path
	if err != nil {
		t.Fatal(err)
	}
	e.socket = filepath.Join(dir, "agent.sock")
	l, err := agentproto.Listen(e.socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&agentproto.Server{Handler: e.agent, Log: quiet()}).Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		e.agent.Close()
		os.RemoveAll(dir)
	})
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (e *agentEnv) newKube(string, time.Duration, *slog.Logger) (plugin.Kube, error) {
	e.builds.Add(1)
	return e.kube, nil
}

// direct is devplumb-direct: the whole call in one process, on the same node.
func (e *agentEnv) direct() *plugin.Plugin {
	return &plugin.Plugin{Log: quiet(), Timeout: 5 * time.Second, NewKube: e.newKube}
}

func (e *agentEnv) args(ifName string) *skel.CmdArgs {
	data, err := json.Marshal(e.conf)
	if err != nil {
		e.t.Fatal(err)
	}
	return &skel.CmdArgs{ContainerID: "c1", Netns: e.pod.Path(), IfName: ifName, Path: e.cniPath,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=u1", StdinData: data}
}

func (e *agentEnv) prepare(cmd, ifName string) agentproto.Prepare {
	a := e.args(ifName)
	return agentproto.Prepare{Command: cmd, ContainerID: a.ContainerID, Netns: a.Netns, IfName: a.IfName,
		Args: a.Args, Path: a.Path, StdinData: a.StdinData}
}

// outcome is what one call through the agent came to.
type outcome struct {
	prepared   *agentproto.PrepareAnswer
	committed  *agentproto.CommitAnswer
	rolledBack *agentproto.RollbackAnswer
	err        error // an agent error: the entry point would exec devplumb-direct
}

// call is one CNI call as the entry point makes it: hello, prepare, the
// delegates run here with libcni (a failed ADD undone at once), commit, and
// the undo and rollback when the commit asks for them.
func (e *agentEnv) call(cmd, ifName string) outcome {
	c, err := agentproto.Dial(e.socket, 5*time.Second, "entry-test")
	if err != nil {
		return outcome{err: err}
	}
	defer c.Close()
	ctx := context.Background()
	p := e.prepare(cmd, ifName)
	var o outcome
	if o.prepared, o.err = c.Prepare(ctx, &p); o.err != nil || o.prepared.Delegate == nil {
		return o
	}
	d := o.prepared.Delegate
	cm := &agentproto.Commit{Attachment: o.prepared.Attachment}
	result, derr := e.run(d, cmd == agentproto.CmdAdd)
	if derr != nil && cmd == agentproto.CmdAdd {
		if _, err := e.run(d, false); err != nil {
			e.t.Errorf("undo of the failed delegate ADD: %v", err)
		}
	}
	cm.Result, cm.Error = e.report(result, derr)
	if o.committed, o.err = c.Commit(ctx, cm); o.err != nil || !o.committed.Undo {
		return o
	}
	rb := &agentproto.Rollback{Attachment: o.prepared.Attachment}
	if _, err := e.run(d, false); err != nil {
		rb.Error = asCNIError(err)
	}
	o.rolledBack, o.err = c.Rollback(ctx, rb)
	return o
}

// report is the delegates' outcome as Commit carries it.
func (e *agentEnv) report(result types.Result, err error) ([]byte, *types.Error) {
	if err != nil {
		return nil, asCNIError(err)
	}
	if result == nil {
		return nil, nil
	}
	raw, err := json.Marshal(result)
	if err != nil {
		e.t.Fatal(err)
	}
	return raw, nil
}

func asCNIError(err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	return types.NewError(types.ErrInternal, err.Error(), "")
}

// run is the entry point's part: the delegates' ADD or DEL through libcni,
// as the agent describes the run.
func (e *agentEnv) run(d *agentproto.Delegate, add bool) (types.Result, error) {
	list, err := libcni.NetworkConfFromBytes(d.ConfList)
	if err != nil {
		e.t.Fatal(err)
	}
	rt := &libcni.RuntimeConf{ContainerID: d.Runtime.ContainerID, NetNS: d.Runtime.NetNS, IfName: d.Runtime.IfName,
		Args: d.Runtime.Args, CapabilityArgs: d.CapabilityArgs, CacheDir: d.CacheDir}
	cni := libcni.NewCNIConfig(filepath.SplitList(e.cniPath), nil)
	if add {
		return cni.AddNetworkList(context.Background(), list, rt)
	}
	return nil, cni.DelNetworkList(context.Background(), list, rt)
}

func (e *agentEnv) records() []*attachment.Record {
	e.t.Helper()
	all, err := attachment.New(filepath.Join(e.root, "state")).List()
	if err != nil {
		e.t.Fatal(err)
	}
	return all
}

// inPod reports whether the pod's netns has a link named ifName.
func (e *agentEnv) inPod(ifName string) bool {
	e.t.Helper()
	found := false
	if err := e.pod.Do(func(ns.NetNS) error {
		_, err := netlink.LinkByName(ifName)
		found = err == nil
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return found
}

func onHost(dev string) bool {
	_, err := netlink.LinkByName(dev)
	return err == nil
}

// statusKube is the stand-in API server: it records network-status writes.
type statusKube struct {
	mu      sync.Mutex
	set     []nadv1.NetworkStatus
	removed []string
}

func (k *statusKube) SetNetworkStatus(_ context.Context, _, _, _ string, entry nadv1.NetworkStatus) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.set = append(k.set, entry)
	return nil
}

func (k *statusKube) RemoveNetworkStatus(_ context.Context, namespace, name, _, network, ifName string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.removed = append(k.removed, strings.Join([]string{namespace, name, network, ifName}, "/"))
	return nil
}

func (k *statusKube) NADResourceName(context.Context, string, string) (string, error) {
	return "", errors.New("the stand-in API server has no NetworkAttachmentDefinitions")
}

func (k *statusKube) writes() ([]nadv1.NetworkStatus, []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]nadv1.NetworkStatus(nil), k.set...), append([]string(nil), k.removed...)
}
