package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/devplumb/devplumb/pkg/cni/agent/agenttest"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig/nodeconfigtest"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
	"github.com/devplumb/devplumb/pkg/cni/plugin/plugintest"
	"github.com/devplumb/devplumb/pkg/testenv"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

func wantCode(t *testing.T, what string, e *types.Error, code uint) {
	t.Helper()
	if e == nil || e.Code != code {
		t.Fatalf("%s: error %+v, want CNI error code %d", what, e, code)
	}
}

// An ADD through the agent (prepare, the delegates run by the caller, commit)
// prints what devplumb-direct's ADD prints and leaves the same record, CNI
// device-info file and network-status entry; a DEL through the agent undoes it
// all and frees the device.
func TestAgentAddIsDirectAdd(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	direct, err := testenv.Stdout(t, func() error { return e.direct().Add(e.args("net1")) })
	if err != nil {
		t.Fatal(err)
	}
	wantRec, wantFile := e.View()
	// host-local hands out the next address to the next ADD: the agent's
	// ADD gets the same one only with the lease of the first gone.
	if err := e.direct().Del(e.args("net1")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(e.Root, "ipam")); err != nil {
		t.Fatal(err)
	}

	o := e.call(agentproto.CmdAdd, "net1")
	if o.Err != nil || o.Committed == nil || o.Committed.Error != nil {
		t.Fatalf("ADD through the agent: %+v, %v", o.Committed, o.Err)
	}
	if got := string(o.Committed.Result); got != direct || !strings.Contains(got, "192.0.2.2/24") {
		t.Errorf("agent's result %s, devplumb-direct's %s", got, direct)
	}
	gotRec, gotFile := e.View()
	if !reflect.DeepEqual(gotRec, wantRec) || gotFile != wantFile {
		t.Errorf("record and CNI file through the agent:\n%+v\n%s\ndirect:\n%+v\n%s", gotRec, gotFile, wantRec, wantFile)
	}
	set, _ := e.kube.writes()
	if len(set) != 2 || !reflect.DeepEqual(set[0], set[1]) {
		t.Errorf("network-status entries written %+v: want two alike", set)
	}
	if !e.InPod("net1") || e.onHost(0) {
		t.Fatal("the device is not in the pod")
	}

	o = e.call(agentproto.CmdDel, "net1")
	if o.Err != nil || o.Committed == nil || o.Committed.Error != nil || len(o.Committed.Result) != 0 {
		t.Fatalf("DEL through the agent: %+v, %+v, %v", o.Prepared, o.Committed, o.Err)
	}
	if !e.onHost(0) || e.InPod("net1") || len(e.Records()) != 0 {
		t.Errorf("after DEL: device on host %v, in pod %v, records %+v", e.onHost(0), e.InPod("net1"), e.Records())
	}
	if _, err := os.Stat(wantRec.CNIFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CNI device-info file after DEL: %v", err)
	}
	e.settle(t)
	if _, removed := e.kube.writes(); len(removed) != 2 {
		t.Errorf("network-status removals %v: want one per DEL", removed)
	}
	// DEL is idempotent: with no record the delegates' DEL from the config.
	if o := e.call(agentproto.CmdDel, "net1"); o.Err != nil || o.Committed == nil || o.Committed.Error != nil {
		t.Errorf("second DEL: %+v, %+v, %v", o.Prepared, o.Committed, o.Err)
	}
}

// A DEL through the agent answers before its network-status removal reaches
// the API server; an ADD of the same pod that comes meanwhile writes its
// entry only after that removal, which therefore never lands on the new entry.
func TestDelRemovalAfterAnswerBeforeNextAdd(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	if o := e.call(agentproto.CmdAdd, "net1"); o.Err != nil || o.Committed.Error != nil {
		t.Fatalf("ADD: %+v, %v", o.Committed, o.Err)
	}
	hold, setSeen := make(chan struct{}), make(chan struct{}, 1)
	e.kube.mu.Lock()
	e.kube.hold, e.kube.setSeen = hold, setSeen
	e.kube.mu.Unlock()
	if o := e.call(agentproto.CmdDel, "net1"); o.Err != nil || o.Committed.Error != nil {
		t.Fatalf("DEL: %+v, %v", o.Committed, o.Err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.agent.Collectors()...)
	held := "# HELP devplumb_agent_pending_removals DELs' network-status removals not yet written to the API server.\n" +
		"# TYPE devplumb_agent_pending_removals gauge\ndevplumb_agent_pending_removals 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(held), "devplumb_agent_pending_removals"); err != nil {
		t.Fatalf("when DEL answered, its removal held: %v", err)
	}
	// The removal is let go when the next ADD sets its entry (it did not
	// wait: the order below fails) or after 2 s (it waits, as it must).
	go func() {
		select {
		case <-setSeen:
		case <-time.After(2 * time.Second):
		}
		close(hold)
	}()
	if o := e.call(agentproto.CmdAdd, "net1"); o.Err != nil || o.Committed.Error != nil {
		t.Fatalf("ADD after the DEL: %+v, %v", o.Committed, o.Err)
	}
	want := []string{"set fast-net/net1", "remove fast-net/net1", "set fast-net/net1"}
	if got := e.kube.order(); !reflect.DeepEqual(got, want) {
		t.Errorf("writes %q: want %q", got, want)
	}
}

// An ADD of the pod's next sandbox that runs outside the agent's order
// (devplumb-direct, while the agent still holds the DEL's removal) keeps its
// network-status entry: the late removal finds the newer sandbox's record
// and leaves the entry.
func TestLateRemovalLeavesNextSandboxEntry(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	if o := e.call(agentproto.CmdAdd, "net1"); o.Err != nil || o.Committed.Error != nil {
		t.Fatalf("ADD: %+v, %v", o.Committed, o.Err)
	}
	hold := make(chan struct{})
	e.kube.mu.Lock()
	e.kube.hold = hold
	e.kube.mu.Unlock()
	if o := e.call(agentproto.CmdDel, "net1"); o.Err != nil || o.Committed.Error != nil {
		t.Fatalf("DEL: %+v, %v", o.Committed, o.Err)
	}
	next := e.args("net1")
	next.ContainerID = "c2"
	if _, err := testenv.Stdout(t, func() error { return e.direct().Add(next) }); err != nil {
		t.Fatalf("devplumb-direct's ADD of the next sandbox: %v", err)
	}
	close(hold)
	e.settle(t)
	want := []string{"set fast-net/net1", "set fast-net/net1", "kept fast-net/net1"}
	if got := e.kube.order(); !reflect.DeepEqual(got, want) {
		t.Errorf("writes %q: want %q", got, want)
	}
}

// A repeated ADD of a completed attachment is answered at prepare with the
// result it had: nothing to run, nothing to commit.
func TestRepeatedAddAnsweredAtPrepare(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	first := e.call(agentproto.CmdAdd, "net1")
	if first.Err != nil || first.Committed.Error != nil {
		t.Fatalf("ADD: %+v, %v", first.Committed, first.Err)
	}
	again := e.call(agentproto.CmdAdd, "net1")
	if again.Err != nil || again.Prepared.Delegate != nil || again.Committed != nil ||
		string(again.Prepared.Result) != string(first.Committed.Result) {
		t.Errorf("repeated ADD: %+v, %v; want the first result %s at prepare", again.Prepared, again.Err, first.Committed.Result)
	}
}

// A commit the agent no longer knows (it gave the call up: restarted, or the
// commit came too late) is an agent error, on which the entry point execs
// devplumb-direct; its ADD finds the record in progress and the device in the
// pod, undoes the delegates and attaches it afresh.
func TestUnknownCommitFallsBackToDirect(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	c, a, raw := e.prepareAndRun("net1")
	e.agent.pending.closeAll() // as an agent restart forgets it
	_, err := c.Commit(t.Context(), &agentproto.Commit{Attachment: a.Attachment, Result: raw})
	if !errors.Is(err, agentproto.ErrUnavailable) || !strings.Contains(err.Error(), "no prepared call") {
		t.Fatalf("commit of a forgotten call: %v, want ErrUnavailable saying so", err)
	}
	if recs := e.Records(); len(recs) != 1 || recs[0].Complete {
		t.Fatalf("records %+v: want one in progress", recs)
	}
	if _, err := testenv.Stdout(t, func() error { return e.direct().Add(e.args("net1")) }); err != nil {
		t.Fatalf("devplumb-direct's ADD after the lost commit: %v", err)
	}
	if recs := e.Records(); len(recs) != 1 || !recs[0].Complete || !e.InPod("net1") {
		t.Errorf("after the fallback: records %+v, in pod %v", recs, e.InPod("net1"))
	}
}

// A delegate ADD failing in the entry point (host-device moved the device,
// then its IPAM failed) is undone there, and its commit rolls back: the
// delegate's error is what the runtime sees, the device is free again.
func TestDelegateErrorRollsBack(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	e.conf["delegate"] = map[string]any{"type": "host-device",
		"ipam": map[string]any{"type": "static", "addresses": []any{map[string]string{"address": "not-an-address"}}}}
	o := e.call(agentproto.CmdAdd, "net1")
	if o.Err != nil || o.Committed == nil {
		t.Fatalf("ADD: %+v, %v", o.Committed, o.Err)
	}
	wantCode(t, "ADD with a failing delegate", o.Committed.Error, plugin.ErrDelegate)
	if o.Committed.Undo || !strings.Contains(o.Committed.Error.Msg, "delegate ADD failed for device "+e.Devs[0]) {
		t.Errorf("commit answer %+v: want the delegate's failure named, nothing to undo", o.Committed)
	}
	if recs := e.Records(); len(recs) != 0 || !e.onHost(0) {
		t.Errorf("after the rollback: records %+v, device on host %v", recs, e.onHost(0))
	}
}

// A commit failing after the delegates succeeded (network-status required, the
// API server unreachable through a real client) asks the entry point for the
// undo: the device stays held until the delegates' DEL ran, and the rollback
// then frees it.
func TestUndoAfterCommitFailure(t *testing.T) {
	e := newAgentEnv(t, 1, Config{Timeout: time.Second, NewKube: realKube})
	if err := os.WriteFile(e.conf["kubeconfig"].(string), []byte(unreachableKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c, a, raw := e.prepareAndRun("net1")
	got, err := c.Commit(t.Context(), &agentproto.Commit{Attachment: a.Attachment, Result: raw})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "ADD with network-status unwritable", got.Error, plugin.ErrKube)
	if !got.Undo {
		t.Fatalf("commit answer %+v: want an undo", got)
	}
	if recs := e.Records(); len(recs) != 1 || recs[0].DeviceID != e.Devs[0] {
		t.Fatalf("records while the undo is due %+v: want the device held", recs)
	}
	if _, err := e.run(a.Delegate, false); err != nil {
		t.Fatal(err)
	}
	rb, err := c.Rollback(t.Context(), &agentproto.Rollback{Attachment: a.Attachment})
	if err != nil || rb == nil {
		t.Fatalf("rollback: %+v, %v", rb, err)
	}
	if recs := e.Records(); len(recs) != 0 || !e.onHost(0) || e.agent.pending.len() != 0 {
		t.Errorf("after the rollback: records %+v, device on host %v, pending %d", recs, e.onHost(0), e.agent.pending.len())
	}
}

const unreachableKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`

func realKube(kubeconfig string, timeout time.Duration, log *slog.Logger) (plugin.Kube, error) {
	c, err := kube.New(kubeconfig, timeout, log)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Ten ADDs through one agent at once each get a device of their own (host-device
// could not move one device twice).
func TestConcurrentAddsTakeDifferentDevices(t *testing.T) {
	const n = 10
	e := newAgentEnv(t, n, Config{})
	var wg sync.WaitGroup
	outcomes := make([]agenttest.Outcome, n)
	for i := range n {
		wg.Go(func() { outcomes[i] = e.call(agentproto.CmdAdd, fmt.Sprintf("net%d", i)) })
	}
	wg.Wait()
	for i, o := range outcomes {
		if o.Err != nil || o.Committed == nil || o.Committed.Error != nil {
			t.Errorf("ADD net%d: %+v, %v", i, o.Committed, o.Err)
		}
	}
	devices := map[string]bool{}
	for _, rec := range e.Records() {
		if !rec.Complete {
			t.Errorf("record %+v in progress", rec)
		}
		devices[rec.DeviceID] = true
	}
	if len(devices) != n {
		t.Errorf("%d devices taken by %d ADDs", len(devices), n)
	}
}

// The agent keeps one PodResources connection per kubelet socket and one
// Kubernetes client per kubeconfig across calls; a kubeconfig rewritten gets
// a new client.
func TestClientsShared(t *testing.T) {
	e := newAgentEnv(t, 3, Config{})
	for _, ifName := range []string{"net1", "net2"} {
		if o := e.call(agentproto.CmdAdd, ifName); o.Err != nil || o.Committed.Error != nil {
			t.Fatalf("ADD %s: %+v, %v", ifName, o.Committed, o.Err)
		}
	}
	if dials, builds := e.dials.Load(), e.builds.Load(); dials != 1 || builds != 1 {
		t.Errorf("two ADDs made %d PodResources clients and %d Kubernetes clients, want one each", dials, builds)
	}
	if err := os.WriteFile(e.conf["kubeconfig"].(string), []byte("rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if o := e.call(agentproto.CmdAdd, "net3"); o.Err != nil || o.Committed.Error != nil {
		t.Fatalf("ADD net3: %+v, %v", o.Committed, o.Err)
	}
	if dials, builds := e.dials.Load(), e.builds.Load(); dials != 1 || builds != 2 {
		t.Errorf("after the kubeconfig changed: %d PodResources clients, %d Kubernetes clients; want 1 and 2", dials, builds)
	}
}

// CHECK is not the agent's: the entry point falls back for it. A full table
// of prepared calls is an agent error too, and devplumb-direct's ADD repairs
// what the refused prepare took.
func TestAgentRefusals(t *testing.T) {
	e := newAgentEnv(t, 2, Config{MaxPending: 1})
	if o := e.call(agentproto.CmdCheck, "net1"); !errors.Is(o.Err, agentproto.ErrUnavailable) {
		t.Errorf("CHECK: %+v, %v: want an agent error", o.Prepared, o.Err)
	}
	c, err := agentproto.Dial(e.socket, 5*time.Second, "entry-test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := e.prepare(agentproto.CmdAdd, "net1")
	if a, err := c.Prepare(t.Context(), &p); err != nil || a.Delegate == nil {
		t.Fatalf("prepare: %+v, %v", a, err)
	}
	o := e.call(agentproto.CmdAdd, "net2")
	if !errors.Is(o.Err, agentproto.ErrUnavailable) || !strings.Contains(o.Err.Error(), "the most the agent keeps") {
		t.Fatalf("ADD with the table full: %v, want an agent error saying so", o.Err)
	}
	if _, err := testenv.Stdout(t, func() error { return e.direct().Add(e.args("net2")) }); err != nil || !e.InPod("net2") {
		t.Errorf("devplumb-direct's ADD after the refused prepare: %v, in pod %v", err, e.InPod("net2"))
	}
}

// A config ADD refuses (a delegate that is devplumb) is a CNI error to print
// at prepare, and its DEL is complete at prepare: nothing to run or commit.
func TestRefusedConfigAnsweredAtPrepare(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	e.conf["delegate"] = map[string]any{"type": "devplumb"}
	o := e.call(agentproto.CmdAdd, "net1")
	if o.Err != nil || o.Prepared.Error == nil || o.Prepared.Error.Code != types.ErrInvalidNetworkConfig || o.Committed != nil {
		t.Errorf("ADD: %+v, %v: want the CNI error at prepare", o.Prepared, o.Err)
	}
	o = e.call(agentproto.CmdDel, "net1")
	if o.Err != nil || o.Prepared.Error != nil || o.Prepared.Delegate != nil || o.Committed != nil {
		t.Errorf("DEL: %+v, %v: want nothing to run", o.Prepared, o.Err)
	}
	if len(e.Records()) != 0 || !e.onHost(0) {
		t.Error("a refused config took the device")
	}
}

// A prepared call whose commit does not come within the pending time is given
// up (closed as a crash): its commit is then an agent error, and
// devplumb-direct's ADD repairs the attachment.
func TestPendingCallExpires(t *testing.T) {
	e := newAgentEnv(t, 1, Config{PendingTTL: time.Millisecond})
	c, a, raw := e.prepareAndRun("net1")
	for e.agent.pending.len() != 0 { // the expiry runs on its own timer
		time.Sleep(time.Millisecond)
	}
	_, err := c.Commit(t.Context(), &agentproto.Commit{Attachment: a.Attachment, Result: raw})
	if !errors.Is(err, agentproto.ErrUnavailable) {
		t.Fatalf("commit after the expiry: %v, want an agent error", err)
	}
	if _, err := testenv.Stdout(t, func() error { return e.direct().Add(e.args("net1")) }); err != nil || !e.InPod("net1") {
		t.Errorf("devplumb-direct's ADD after the expiry: %v, in pod %v", err, e.InPod("net1"))
	}
}

// A kubelet socket replaced (the kubelet restarted) gets a new PodResources
// client: the old one would wait out gRPC's reconnect backoff.
func TestKubeletSocketReplacedGetsANewClient(t *testing.T) {
	e := newAgentEnv(t, 2, Config{})
	if o := e.call(agentproto.CmdAdd, "net1"); o.Err != nil || o.Committed.Error != nil {
		t.Fatalf("ADD net1: %+v, %v", o.Committed, o.Err)
	}
	restarted := podresourcestest.NewServer(t)
	pod, _ := e.PodResources.GetPod("default", "p1")
	restarted.SetPod(pod)
	if err := os.Rename(restarted.Socket, e.PodResources.Socket); err != nil {
		t.Fatal(err)
	}
	if o := e.call(agentproto.CmdAdd, "net2"); o.Err != nil || o.Committed.Error != nil {
		t.Fatalf("ADD net2 after the kubelet restart: %+v, %v", o.Committed, o.Err)
	}
	if dials := e.dials.Load(); dials != 2 || restarted.Calls("Get")+restarted.Calls("List") == 0 {
		t.Errorf("PodResources clients made %d, calls to the new kubelet %d: want a second client, used",
			dials, restarted.Calls("Get")+restarted.Calls("List"))
	}
}

// The agent serves a call with the node config its entry point reads (the
// runtime's environment names it): the call's state and the delegates'
// cache are that node config's, not the agent's own.
func TestCallsNodeConfigIsServed(t *testing.T) {
	e := newAgentEnv(t, 1, Config{})
	stateDir := filepath.Join(e.Root, "other-state")
	node := nodeconfigtest.Write(t, map[string]any{"stateDir": stateDir, "podResourcesSocket": e.PodResources.Socket,
		"deviceInfoDir": filepath.Join(e.Root, "devinfo")})
	p := e.prepare(agentproto.CmdAdd, "net1")
	p.NodeConfig = node
	o := agenttest.Call(t, e.socket, &p)
	if o.Err != nil || o.Prepared == nil || o.Prepared.Delegate == nil {
		t.Fatalf("ADD: %+v, %v", o.Prepared, o.Err)
	}
	if want := filepath.Join(stateDir, "libcni", "fast-net"); o.Prepared.Delegate.CacheDir != want {
		t.Errorf("cache dir %q, want the call's node config's %q", o.Prepared.Delegate.CacheDir, want)
	}
	if got := plugintest.Records(t, stateDir); len(got) != 1 || len(e.Records()) != 0 {
		t.Errorf("records: %d in the call's state dir, %d in the agent's: want 1 and 0", len(got), len(e.Records()))
	}
	p = e.prepare(agentproto.CmdDel, "net1")
	p.NodeConfig = node
	if o := agenttest.Call(t, e.socket, &p); o.Err != nil || (o.Prepared != nil && o.Prepared.Error != nil) {
		t.Fatalf("DEL: %+v, %v", o.Prepared, o.Err)
	}
	if got := plugintest.Records(t, stateDir); len(got) != 0 || !e.onHost(0) {
		t.Errorf("after DEL: %d records, device on host %v", len(got), e.onHost(0))
	}
}
