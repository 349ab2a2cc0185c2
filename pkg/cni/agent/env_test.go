package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/devplumb/devplumb/pkg/cni/agent/agenttest"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
	"github.com/devplumb/devplumb/pkg/cni/plugin/plugintest"
	"github.com/devplumb/devplumb/podresources"
)

// agentEnv is a node whose pod p1 holds veth ends as devices of example.com/vf
// (DP device-info files, a real PodResources server), an agent serving on a
// real socket, and the real host-device plugin with host-local IPAM as the
// delegate, which moves each device into the pod's real netns. The API server
// is a stand-in recording network-status writes.
type agentEnv struct {
	*plugintest.Node
	t      *testing.T
	agent  *Agent
	socket string
	conf   map[string]any
	kube   *statusKube
	builds atomic.Int32 // Kubernetes clients built
	dials  atomic.Int32 // PodResources clients made
}

func newAgentEnv(t *testing.T, devices int, cfg Config) *agentEnv {
	e := &agentEnv{Node: plugintest.NewNode(t, devices), t: t, kube: &statusKube{}}
	kubeconfig := filepath.Join(e.Root, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("stand-in\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.conf = e.Conf(map[string]any{"type": "host-device", "ipam": map[string]any{"type": "host-local",
		"ranges": [][]map[string]string{{{"subnet": "192.0.2.0/24"}}}, "dataDir": filepath.Join(e.Root, "ipam")}})
	e.conf["kubeconfig"], e.conf["events"] = kubeconfig, "none"
	nodeconfigtest.SplitEnv(t, e.conf) // before any call: t.Setenv may not run beside them
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
	data := nodeconfigtest.SplitEnv(e.t, e.conf)
	return &skel.CmdArgs{ContainerID: "c1", Netns: e.Pod.Path(), IfName: ifName, Path: e.CNIPath,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p1;K8S_POD_UID=u1", StdinData: data}
}

func (e *agentEnv) prepare(cmd, ifName string) agentproto.Prepare {
	a := e.args(ifName)
	return agentproto.Prepare{Command: cmd, ContainerID: a.ContainerID, Netns: a.Netns, IfName: a.IfName,
		Args: a.Args, Path: a.Path, StdinData: a.StdinData}
}

// call is one CNI call through the agent, as the entry point makes it.
func (e *agentEnv) call(cmd, ifName string) agenttest.Outcome {
	p := e.prepare(cmd, ifName)
	return agenttest.Call(e.t, e.socket, &p)
}

// prepareAndRun is an ADD as the entry point begins it, up to the commit: the
// connection, the agent's answer and the delegates' result to commit.
func (e *agentEnv) prepareAndRun(ifName string) (*agentproto.Client, *agentproto.PrepareAnswer, []byte) {
	t := e.t
	c, err := agentproto.Dial(e.socket, 5*time.Second, "entry-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := e.prepare(agentproto.CmdAdd, ifName)
	a, err := c.Prepare(t.Context(), &p)
	if err != nil || a.Delegate == nil {
		t.Fatalf("prepare: %+v, %v", a, err)
	}
	result, err := e.run(a.Delegate, true)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := agenttest.Report(t, result, nil)
	return c, a, raw
}

// run is the entry point's delegates' run, here.
func (e *agentEnv) run(d *agentproto.Delegate, add bool) (types.Result, error) {
	return agenttest.Run(d, e.CNIPath, add)
}

// onHost reports whether device i is in the host's netns.
func (e *agentEnv) onHost(i int) bool { return e.OnHost(e.Devs[i]) }

// statusKube is the stand-in API server: it records network-status writes,
// in order in log ("set ..." and "remove ...").
type statusKube struct {
	mu      sync.Mutex
	set     []nadv1.NetworkStatus
	removed []string
	log     []string
	// hold, when set, is received from before a removal is recorded;
	// setSeen, when set, gets a value when an entry is set.
	hold, setSeen chan struct{}
}

func (k *statusKube) SetNetworkStatus(_ context.Context, _, _, _ string, entry nadv1.NetworkStatus) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.set = append(k.set, entry)
	k.log = append(k.log, "set "+entry.Name+"/"+entry.Interface)
	if k.setSeen != nil {
		select {
		case k.setSeen <- struct{}{}:
		default:
		}
	}
	return nil
}

// RemoveNetworkStatusUnless asks keep after the hold, as the real client
// asks it after reading the pod.
func (k *statusKube) RemoveNetworkStatusUnless(_ context.Context, namespace, name, _, network, ifName string, keep func() bool) error {
	k.mu.Lock()
	hold := k.hold
	k.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if keep != nil && keep() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.log = append(k.log, "kept "+network+"/"+ifName)
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.removed = append(k.removed, strings.Join([]string{namespace, name, network, ifName}, "/"))
	k.log = append(k.log, "remove "+network+"/"+ifName)
	return nil
}

// order is the writes so far, in order.
func (k *statusKube) order() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.log...)
}

// settle waits until the agent has written the removals DELs left it.
func (e *agentEnv) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.agent.later.len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d DEL removals still unwritten after 10 s", e.agent.later.len())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (k *statusKube) NADResourceName(context.Context, string, string) (string, error) {
	return "", errors.New("the stand-in API server has no NetworkAttachmentDefinitions")
}

func (k *statusKube) writes() ([]nadv1.NetworkStatus, []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]nadv1.NetworkStatus(nil), k.set...), append([]string(nil), k.removed...)
}
