package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// The idle agent answers the entry point's calls at once: an ADD's prepare with the
// call's config as the delegate to run, its commit with the result it was given, a
// DEL's prepare sent with the hello.
func TestIdleAgentAnswers(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "idle", "agent.sock")
	stop, err := startIdleAgent(socket, func() *statusDaemon { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	p := &agentproto.Prepare{Command: agentproto.CmdAdd, ContainerID: "c1", IfName: "net1", StdinData: []byte(`{"name":"n"}`)}
	c, err := agentproto.Dial(socket, time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ans, err := c.Prepare(ctx, p)
	if err != nil || ans.Attachment != "c1/net1" || ans.Delegate == nil || !bytes.Equal(ans.Delegate.ConfList, p.StdinData) {
		t.Fatalf("ADD prepare: %+v, %v", ans, err)
	}
	out, err := c.Commit(ctx, &agentproto.Commit{Attachment: ans.Attachment, Result: []byte(`{"ips":[]}`)})
	if err != nil || string(out.Result) != `{"ips":[]}` {
		t.Fatalf("ADD commit: %+v, %v", out, err)
	}
	p.Command = agentproto.CmdDel
	d, ans, err := agentproto.DialDel(ctx, socket, time.Second, "test", p)
	if err != nil || ans.Attachment != "c1/net1" {
		t.Fatalf("DEL prepare with the hello: %+v, %v", ans, err)
	}
	defer d.Close()
	if _, err := d.Commit(ctx, &agentproto.Commit{Attachment: ans.Attachment}); err != nil {
		t.Fatalf("DEL commit: %v", err)
	}
}

// For a network whose config says "agentWrites", the idle agent makes the status
// daemon's writes in the commit: an ADD's network-status and claim entry before it
// answers; a DEL's claim entry removed before it answers, the pod's after. A network
// that does not say so gets none.
func TestIdleAgentMakesTheWrites(t *testing.T) {
	k, d, claim := statusFixture(t)
	socket := filepath.Join(t.TempDir(), "idle", "agent.sock")
	stop, err := startIdleAgent(socket, func() *statusDaemon { return d })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	conf, err := json.Marshal(map[string]any{"name": "net-a", "agentWrites": true, "statusClaim": claim})
	if err != nil {
		t.Fatal(err)
	}
	result := `{"cniVersion":"1.0.0","interfaces":[{"name":"net1","mac":"02:00:00:00:00:01","sandbox":"/run/netns/x"}],` +
		`"ips":[{"address":"192.0.2.7/24","interface":0}]}`
	p := &agentproto.Prepare{Command: agentproto.CmdAdd, ContainerID: "c1", IfName: "net1", StdinData: conf,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + podNS + ";K8S_POD_NAME=p1"}
	idleCall(t, socket, p, result)
	if got := annotation(t, k, "p1"); !strings.Contains(got, `"net-a"`) || !strings.Contains(got, "192.0.2.7") {
		t.Errorf("network-status once ADD answered: %q, want net-a's entry with 192.0.2.7", got)
	}
	if got := claimDevices(t, k, "p1-claim"); len(got) != 1 || got[0].NetworkData == nil || got[0].NetworkData.InterfaceName != "net1" {
		t.Errorf("claim's status.devices once ADD answered: %+v, want nic-1 with net1", got)
	}
	p.Command = agentproto.CmdDel
	idleCall(t, socket, p, "")
	if got := claimDevices(t, k, "p1-claim"); len(got) != 0 {
		t.Errorf("claim's status.devices once DEL answered: %+v, want none", got)
	}
	awaitNoAnnotation(t, k, "p1")
	p.Command, p.StdinData = agentproto.CmdAdd, []byte(`{"name":"net-b"}`)
	idleCall(t, socket, p, result)
	if got := annotation(t, k, "p1"); got != "" {
		t.Errorf("network-status after an ADD of a network that does not ask for the writes: %q, want none", got)
	}
}

// idleCall makes p's call on the idle agent at socket as the pass-through makes it,
// committing result.
func idleCall(t *testing.T, socket string, p *agentproto.Prepare, result string) {
	t.Helper()
	ctx := context.Background()
	var c *agentproto.Client
	var ans *agentproto.PrepareAnswer
	var err error
	if p.Command == agentproto.CmdDel {
		c, ans, err = agentproto.DialDel(ctx, socket, 5*time.Second, "test", p)
	} else if c, err = agentproto.Dial(socket, 5*time.Second, "test"); err == nil {
		ans, err = c.Prepare(ctx, p)
	}
	if err != nil {
		t.Fatalf("%s prepare: %v", p.Command, err)
	}
	defer c.Close()
	out, err := c.Commit(ctx, &agentproto.Commit{Attachment: ans.Attachment, Result: []byte(result)})
	if err != nil || out.Error != nil {
		t.Fatalf("%s commit: %+v, %v", p.Command, out, err)
	}
}

// The note on the least an agent-based meta-plugin costs: the reference over the
// pass-through, the plain row over the reference, and what the target leaves.
func TestLeastAgentNote(t *testing.T) {
	vs := []*variant{{net: "floor", ms: []float64{100}}, {net: "pass", ms: []float64{120}},
		{net: "passagent", ms: []float64{125}}, {net: "dpagent", ms: []float64{130}}}
	note := leastAgentNote(vs, 100, 20)
	for _, want := range []string{"5.0 ms over the pass-through (1.04 ×)", "5.0 ms over that (1.04 × it)", "leaves 1.0 ms"} {
		if !strings.Contains(note, want) {
			t.Errorf("note lacks %q:\n%s", want, note)
		}
	}
	if note := leastAgentNote(vs[:3], 100, 20); note != "" {
		t.Errorf("a note without the agent's row: %q", note)
	}
}

// With paired rounds, the note gives the least's paired time and the plain row's over it.
func TestLeastAgentNotePaired(t *testing.T) {
	vs := []*variant{{net: "floor", ms: []float64{100}}, {net: "pass", ms: []float64{120}, paired: []float64{120, 121, 122}},
		{net: "passagent", ms: []float64{125}, paired: []float64{123, 124, 125}}, {net: "dpagent", ms: []float64{130}, paired: []float64{130, 131, 132}}}
	note := leastAgentNote(vs, 100, 20)
	for _, want := range []string{"In the 3 paired rounds: that least 3.0 ms over the pass-through", "the plain row 7.0 ms over that least"} {
		if !strings.Contains(note, want) {
			t.Errorf("note lacks %q:\n%s", want, note)
		}
	}
}

// The note on the least an agent-based meta-plugin doing a row's own work (the records,
// the API writes) costs: each least's paired time over the pass-through, whether it
// meets the row's target itself, and the row's time over it.
func TestLeastAgentWorkNote(t *testing.T) {
	rounds := func(base float64) []float64 {
		r := make([]float64, 12)
		for i := range r {
			r[i] = base + float64(i%3)
		}
		return r
	}
	vs := []*variant{{net: "pass", paired: rounds(100)}, {net: "passagentstatus", paired: rounds(112)},
		{net: "dpagentkube", paired: rounds(115)}, {net: "passagentdra", paired: rounds(105)}, {net: "dpdraagent", paired: rounds(120)},
		{net: "passagentrecords", paired: rounds(106)}, {net: "dpagent", paired: rounds(107)}}
	note := leastAgentWorkNote(vs, 100)
	for _, want := range []string{
		"keeping the records, for the plain row, 6.0 ms over the pass-through (95% interval 6.0 to 6.0 ms; 12 rounds), against the row's 1.05 × target (5.0 ms) that least alone: missed; the row through the agent 1.0 ms over that least",
		"with network-status, 12.0 ms over the pass-through (95% interval 12.0 to 12.0 ms; 12 rounds), against the row's 1.10 × target (10.0 ms) that least alone: missed; the row through the agent 3.0 ms over that least",
		"with a DRA claim's networkData and network-status, 5.0 ms over the pass-through (95% interval 5.0 to 5.0 ms; 12 rounds), against the row's 1.15 × target (15.0 ms) that least alone: met; the row through the agent 15.0 ms over that least",
	} {
		if !strings.Contains(note, want) {
			t.Errorf("note lacks %q:\n%s", want, note)
		}
	}
	if note := leastAgentWorkNote(vs[:3], 100); strings.Contains(note, "DRA") || strings.Contains(note, "plain row,") {
		t.Errorf("a note on the DRA or the records' least without its row: %q", note)
	}
	if note := leastAgentWorkNote(vs[:1], 100); note != "" {
		t.Errorf("a note without the leasts: %q", note)
	}
}

// For a network whose config says "agentRecords", the idle agent keeps devplumb's
// promises as the least agent can: an ADD's prepare records the attachment with a
// device of the pod no other record holds, and copies its device-info file, before the
// delegates run; its commit records it completed; a DEL's commit removes the file and
// the record, freeing the device.
func TestIdleAgentKeepsRecords(t *testing.T) {
	srv := podresourcestest.NewServer(t)
	srv.SetPod(&v1.PodResources{Namespace: podNS, Name: "p1", Containers: []*v1.ContainerResources{{
		Name: "c", Devices: []*v1.ContainerDevices{{ResourceName: Resource, DeviceIds: []string{"d0", "d1"}}}}}})
	dir := t.TempDir()
	rc := recordsConf{StateDir: filepath.Join(dir, "state"), DeviceInfoDir: filepath.Join(dir, "devinfo"),
		PodResources: srv.Socket, Resource: Resource}
	files := devinfo.NewStore(rc.DeviceInfoDir)
	for i, d := range []string{"d0", "d1"} {
		if err := files.WriteDP(Resource, d, pciInfo(i)); err != nil {
			t.Fatal(err)
		}
	}
	socket := filepath.Join(dir, "idle", "agent.sock")
	stop, err := startIdleAgent(socket, func() *statusDaemon { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	conf, err := json.Marshal(map[string]any{"name": "n", "agentRecords": rc})
	if err != nil {
		t.Fatal(err)
	}
	call := func(cmd, cid string) *agentproto.Prepare {
		return &agentproto.Prepare{Command: cmd, ContainerID: cid, IfName: "net1", StdinData: conf,
			Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + podNS + ";K8S_POD_NAME=p1"}
	}
	read := func(cid string) (rec record) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(rc.StateDir, cid+"_net1.json"))
		if err == nil {
			err = json.Unmarshal(data, &rec)
		}
		if err != nil {
			t.Fatalf("record of %s: %v", cid, err)
		}
		return rec
	}
	ctx := context.Background()
	c, err := agentproto.Dial(socket, 5*time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ans, err := c.Prepare(ctx, call(agentproto.CmdAdd, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	if rec := read("c1"); rec.Device != "d0" || rec.Complete {
		t.Fatalf("record once ADD is prepared: %+v, want d0, not complete", rec)
	}
	if info, err := devinfo.ReadFile(read("c1").CNIFile); err != nil || info.Pci.PciAddress != pciInfo(0).Pci.PciAddress {
		t.Fatalf("CNI device-info file once ADD is prepared: %+v, %v", info, err)
	}
	if _, err := c.Commit(ctx, &agentproto.Commit{Attachment: ans.Attachment, Result: []byte(`{"ips":[]}`)}); err != nil {
		t.Fatal(err)
	}
	if rec := read("c1"); !rec.Complete || string(rec.Result) != `{"ips":[]}` {
		t.Fatalf("record once ADD is committed: %+v, want complete with the result", rec)
	}
	idleCall(t, socket, call(agentproto.CmdAdd, "c2"), `{}`)
	if rec := read("c2"); rec.Device != "d1" {
		t.Fatalf("second attachment's record: %+v, want d1 (d0 is c1's)", rec)
	}
	c3, err := agentproto.Dial(socket, 5*time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := c3.Prepare(ctx, call(agentproto.CmdAdd, "c3")); err == nil || !strings.Contains(err.Error(), "no free device") {
		t.Fatalf("third attachment of a pod with two devices: %v, want no free device", err)
	}
	cniFile := read("c1").CNIFile
	idleCall(t, socket, call(agentproto.CmdDel, "c1"), "")
	for _, p := range []string{cniFile, filepath.Join(rc.StateDir, "c1_net1.json")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s after DEL: %v, want it gone", p, err)
		}
	}
	idleCall(t, socket, call(agentproto.CmdAdd, "c3"), `{}`)
	if rec := read("c3"); rec.Device != "d0" {
		t.Fatalf("attachment after c1's DEL: %+v, want d0", rec)
	}
}

// TestMain lets the test binary serve as P1's idle agent's process (idleproc.go).
func TestMain(m *testing.M) {
	ServeIdleAgentIfAsked()
	os.Exit(m.Run())
}

// P1's idle agent runs in a process of its own, as any agent does: it answers the
// entry point's calls from another pid, and is gone once stopped.
func TestIdleAgentInItsOwnProcess(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "idle", "agent.sock")
	stop, err := spawnIdleAgent(socket, "")
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	if pid := peerPID(t, socket); pid == os.Getpid() {
		t.Fatalf("the idle agent's pid is this test's (%d): want another process", pid)
	}
	p := &agentproto.Prepare{Command: agentproto.CmdAdd, ContainerID: "c1", IfName: "net1", StdinData: []byte(`{"name":"n"}`)}
	idleCall(t, socket, p, `{"ips":[]}`)
	p.Command = agentproto.CmdDel
	idleCall(t, socket, p, "")
	stop()
	stopped = true
	if c, err := agentproto.Dial(socket, time.Second, "test"); err == nil {
		c.Close()
		t.Fatal("the idle agent answers once stopped")
	}
}

// peerPID is the pid of the process listening on socket (SO_PEERCRED).
func peerPID(t *testing.T, socket string) int {
	t.Helper()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cred *unix.Ucred
	if err := raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return int(cred.Pid)
}
