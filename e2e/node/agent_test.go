package node_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/node"
	"github.com/devplumb/devplumb/pkg/cni/agentproto"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// The node agent is the devplumb DaemonSet's agent container (deployments/), as shipped:
// every scenario of this package runs with it. These tests show that it is the agent that
// serves (devplumb-direct taken off the node: the entry point has nothing else), and what
// happens when it is killed, of another version, or spoken to by strangers.

// agentSocket is the agent's socket on the node, seen from the host.
func agentSocket() string { return nd.HostPath(agentproto.DefaultSocket) }

// waitAgent waits until the agent answers a hello on its socket and returns its hello.
func waitAgent(t *testing.T) agentproto.Hello {
	t.Helper()
	var h agentproto.Hello
	waitFor(t, "the devplumb agent answering on "+agentproto.DefaultSocket, func(context.Context) error {
		c, err := agentproto.Dial(agentSocket(), 5*time.Second, "e2e-node")
		if err != nil {
			return err
		}
		h = c.Agent
		return c.Close()
	})
	return h
}

// agentOnly takes devplumb-direct off the node's CNI bin dir until the test ends: the
// entry point then has nothing to fall back to (a call the agent does not serve fails with
// code 999), so every ADD and DEL that succeeds meanwhile went through the agent. The
// installer copies the binaries only when it starts, so nothing puts it back early.
func agentOnly(t *testing.T) {
	t.Helper()
	deployed(t)
	waitAgent(t)
	bin := nd.HostPath("/opt/cni/bin/devplumb-direct")
	aside := filepath.Join(nd.Dir, "devplumb-direct.aside")
	e2etest.Must(t, os.Rename(bin, aside))
	t.Cleanup(func() { e2etest.Must(t, os.Rename(aside, bin)) })
}

// agentPod is the devplumb DaemonSet's pod.
func agentPod(t *testing.T) *corev1.Pod {
	t.Helper()
	pods, err := nd.Client.CoreV1().Pods("kube-system").List(ctx(t), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=devplumb"})
	e2etest.Must(t, err)
	if len(pods.Items) != 1 {
		t.Fatalf("%d devplumb pods, want 1: %s", len(pods.Items), podStates(ctx(t), "kube-system"))
	}
	return &pods.Items[0]
}

// agentRestarts is how often the kubelet restarted the agent container.
func agentRestarts(t *testing.T) int32 {
	t.Helper()
	for _, cs := range agentPod(t).Status.ContainerStatuses {
		if cs.Name == "agent" {
			return cs.RestartCount
		}
	}
	t.Fatal("the devplumb pod has no agent container status")
	return 0
}

// agentPid is the pid of the agent process: devplumb-agent in a cgroup of the devplumb
// pod (other tests on this machine may run agents of their own).
func agentPid(t *testing.T) int {
	t.Helper()
	uid := string(agentPod(t).UID)
	ents, err := os.ReadDir("/proc")
	e2etest.Must(t, err)
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err1 := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		cg, err2 := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err1 != nil || err2 != nil {
			continue // gone meanwhile
		}
		argv := strings.Split(string(cmd), "\x00")
		if filepath.Base(argv[0]) == "devplumb-agent" &&
			(strings.Contains(string(cg), uid) || strings.Contains(string(cg), strings.ReplaceAll(uid, "-", "_"))) {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("agent processes of pod %s: %v, want one", uid, pids)
	}
	return pids[0]
}

// agentLog is what the agent containers of the devplumb pod logged, restarts included.
func agentLog(t *testing.T) string {
	t.Helper()
	return containerLog(t, agentPod(t), "agent")
}

// TestAgentServesAttachments: with the shipped agent and no devplumb-direct on the node,
// pods get their attachments through the agent alone, and lose them through it: under
// Multus thick two attachments of one resource in one pod (their network-status Multus's),
// and devplumb alone in the node's conflist, whose network-status entry the agent writes
// with the installer's kubeconfig.
func TestAgentServesAttachments(t *testing.T) {
	t.Run("multus-thick", func(t *testing.T) {
		agentOnly(t)
		countedByAgent(t, "netdev-net", 2, func() { twoAttachmentsOfOneResource(t, multusThick) })
	})
	t.Run("alone", func(t *testing.T) {
		agentOnly(t)
		countedByAgent(t, "devplumb-alone", 1, func() { TestDevplumbAloneInTheConflist(t) })
	})
}

// countedByAgent runs scenario and wants the agent's metrics to count n more ADDs and DELs of
// network that it served (path agent).
func countedByAgent(t *testing.T, network string, n float64, scenario func()) {
	t.Helper()
	adds, dels := callMetrics(t, "ADD", network), callMetrics(t, "DEL", network)
	scenario()
	logCalls(t, "ADD "+network, waitCalls(t, adds, "ADD", network, "agent", n))
	logCalls(t, "DEL "+network, waitCalls(t, dels, "DEL", network, "agent", n))
}

// TestAgentDRAClaim: TestDRAClaimToPodNetwork (a claim the container references and a
// network-only claim, the claims' networkData, their removal) with the agent alone serving.
func TestAgentDRAClaim(t *testing.T) {
	agentOnly(t)
	TestDRAClaimToPodNetwork(t)
}

// TestAgentKubeletRestart: TestKubeletAndNetdevDPRestart (the kubelet restarted under a
// running pod, a new pod after it) with the agent alone serving: the same agent process,
// which outlived the kubelet, gives the new pod its device through the new kubelet's
// PodResources socket.
func TestAgentKubeletRestart(t *testing.T) {
	agentOnly(t)
	before := agentPid(t)
	TestKubeletAndNetdevDPRestart(t)
	if after := agentPid(t); after != before {
		t.Errorf("the agent process changed across the kubelet's restart: pid %d, then %d", before, after)
	}
}

// TestAgentKilledMidBurst: devplumb alone in the node's conflist; 20 pods, one device each,
// are created at once and the agent process is killed (SIGKILL) as soon as the first runs,
// while the others' ADDs are under way. Every pod runs with its own device as eth0 and its
// network-status entry: calls in flight and those until the kubelet restarted the agent ran
// whole in devplumb-direct, or repaired what the agent had begun. The restarted agent serves
// again, and deleting the pods brings every device back and leaves no state.
func TestAgentKilledMidBurst(t *testing.T) {
	deployed(t)
	waitAgent(t)
	names := stormDevices(t)
	useConflist(t, "agent-burst", hostDeviceConflist("agent-burst", "example.com/storm", "192.0.2.40/24"))
	restarts, pid := agentRestarts(t), agentPid(t)

	before := callMetrics(t, "ADD", "agent-burst")
	pods := createBurst(t, "burst", len(names), map[string]string{"example.com/storm": "1"})
	// The agent's own count of the ADDs it completed: a pod runs well after its ADD.
	var served float64
	waitFor(t, "the agent serving the burst's first ADD", func(context.Context) error {
		if served = callMetrics(t, "ADD", "agent-burst")["agent"].count - before["agent"].count; served == 0 {
			return errors.New("none served yet")
		}
		return nil
	})
	e2etest.Must(t, killPid(pid))
	t.Logf("killed the agent (pid %d) when it had served %v of %d ADDs", pid, served, len(pods))
	if served >= float64(len(pods)) {
		t.Fatalf("the agent served all %d ADDs before it was killed: nothing was under way", len(pods))
	}
	checkBurst(t, pods, "eth0")
	for _, p := range pods {
		networkStatus(t, p, "agent-burst", "eth0")
	}
	waitFor(t, "the kubelet restarting the agent", func(context.Context) error {
		if r := agentRestarts(t); r <= restarts {
			return fmt.Errorf("agent restarted %d times, %d before the kill", r, restarts)
		}
		return nil
	})
	waitAgent(t)
	// The restarted agent counts what it served and what devplumb-direct ran meanwhile
	// (spooled); what the killed one served went with it.
	logCalls(t, "ADDs of the burst seen by the restarted agent", callMetrics(t, "ADD", "agent-burst"))
	for _, p := range pods {
		deletePod(t, p)
	}
	waitDevicesBack(t, names)
	for _, dir := range []string{"/run/k8s.cni.cncf.io/devinfo/cni", "/var/lib/cni/devplumb/attachments", "/var/lib/cni/networks/agent-burst"} {
		if left := testenv.Files(t, nd.HostPath(dir)); len(left) > 0 {
			t.Errorf("left in %s after the pods were deleted: %v", dir, left)
		}
	}
}

func killPid(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// createBurst creates n pods at once (prefix-00...), with the given limits.
func createBurst(t *testing.T, prefix string, n int, limits map[string]string) []*corev1.Pod {
	t.Helper()
	return createBurstAnnotated(t, prefix, n, limits, nil)
}

// createBurstAnnotated is createBurst with annotations; at most 10 creations at a time.
func createBurstAnnotated(t *testing.T, prefix string, n int, limits, annotations map[string]string) []*corev1.Pod {
	t.Helper()
	pods := make([]*corev1.Pod, n)
	slots := make(chan struct{}, 10)
	done := make(chan struct{}, n)
	for i := range pods {
		go func() {
			slots <- struct{}{}
			defer func() { <-slots; done <- struct{}{} }()
			pods[i] = createPodScript(t, fmt.Sprintf("%s-%02d", prefix, i), limits, annotations, linksScript)
		}()
	}
	for range pods {
		<-done
	}
	for _, p := range pods {
		if p == nil {
			t.FailNow() // its creation failed and said why
		}
	}
	return pods
}

// running counts the pods that run.
func running(c context.Context, pods []*corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if got, err := nd.Client.CoreV1().Pods(p.Namespace).Get(c, p.Name, metav1.GetOptions{}); err == nil && got.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

// checkBurst: every pod runs with one device of example.com/storm, no device twice, each
// gone from the host and the pod's interface ifName.
func checkBurst(t *testing.T, pods []*corev1.Pod, ifName string) {
	t.Helper()
	owner := map[string]string{}
	for _, p := range pods {
		waitRunning(t, p)
		devs := podDevices(t, p, "example.com/storm")
		if len(devs) != 1 {
			t.Fatalf("pod %s has %v", p.Name, devs)
		}
		if o, dup := owner[devs[0]]; dup {
			t.Fatalf("device %s given to %s and %s", devs[0], o, p.Name)
		}
		owner[devs[0]] = p.Name
		if _, err := netlink.LinkByName(devs[0]); err == nil {
			t.Errorf("%s, pod %s's device, is still on the host", devs[0], p.Name)
		}
		checkInterface(t, p, podView(t, p), ifName, devs[0])
	}
}

// TestAgentVersionSkew: the node's entry point is replaced by one of the next protocol
// version (built from this source with agentproto.ProtocolVersion one higher, as a newer
// release would be). The agent refuses its hello, naming both versions, and the entry point
// runs devplumb-direct: devplumb alone in the conflist still gives the pod its device and
// network-status entry, and takes them back on delete.
func TestAgentVersionSkew(t *testing.T) {
	deployed(t)
	waitAgent(t)
	useEntryPoint(t, skewedEntryPoint(t))
	before := callMetrics(t, "ADD", "devplumb-alone")
	TestDevplumbAloneInTheConflist(t)
	// devplumb-direct's calls reach the agent's metrics through the spool it drains.
	after := waitCalls(t, before, "ADD", "devplumb-alone", "direct", 1)
	if got := after["agent"].count - before["agent"].count; got != 0 {
		t.Errorf("the agent served %v ADDs of the skewed entry point", got)
	}
	want := fmt.Sprintf("protocol version %d (build %s", agentproto.ProtocolVersion+1, skewBuild)
	if log := agentLog(t); !strings.Contains(log, want) {
		t.Errorf("the agent's log does not show the skewed entry point's hello refused (%q):\n%s", want, tailLines(log, 20))
	}
}

func tailLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

// TestAgentSocketRefusals: the real agent's socket is root's, mode 0600, in a root-owned
// directory others cannot write. A non-root process cannot connect; one that gets past the
// mode with CAP_DAC_OVERRIDE is refused by the agent's peer check (and the agent logs it).
// Malformed frames (past the 4 MiB bound, not JSON, a prepare before hello, two messages
// in one, half a frame) are each answered with an error and the connection closed. The
// agent keeps serving: devplumb alone in the conflist attaches a pod through it alone.
func TestAgentSocketRefusals(t *testing.T) {
	deployed(t)
	waitAgent(t)
	checkSocketModes(t)
	peer := agentPeer(t)
	if out := runAsNobody(t, peer); !strings.HasPrefix(out, "refused:") || !strings.Contains(out, "permission denied") {
		t.Errorf("uid 65534 without capabilities: %q, want refused: permission denied", out)
	}
	if out := runAsNobody(t, peer, capDACOverride); !strings.HasPrefix(out, "refused:") || !strings.Contains(out, "peer uid 65534") {
		t.Errorf("uid 65534 with CAP_DAC_OVERRIDE: %q, want refused by the agent's peer check", out)
	}
	for _, f := range malformedFrames() {
		t.Run(f.name, func(t *testing.T) { sendMalformed(t, f.data) })
	}
	if log := agentLog(t); !strings.Contains(log, "peer uid 65534") {
		t.Errorf("the agent's log does not show the non-root peer refused:\n%s", tailLines(log, 20))
	}
	agentOnly(t)
	TestDevplumbAloneInTheConflist(t)
}

// checkSocketModes: the socket is root's with mode 0600, its directory root's and not
// writable by others.
func checkSocketModes(t *testing.T) {
	t.Helper()
	for path, want := range map[string]os.FileMode{agentSocket(): 0o600, filepath.Dir(agentSocket()): 0} {
		st, err := os.Lstat(path)
		e2etest.Must(t, err)
		owner, mode := st.Sys().(*syscall.Stat_t).Uid, st.Mode().Perm()
		if owner != 0 || (want != 0 && mode != want) || mode&0o022 != 0 {
			t.Errorf("%s: owner %d mode %v; want root's, not writable by others (the socket 0600)", path, owner, mode)
		}
	}
}

// frame is one malformed thing to send on the socket.
type frame struct {
	name string
	data []byte
}

func framed(body string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

func malformedFrames() []frame {
	hello := fmt.Sprintf(`{"protocol":%d,"build":"e2e"}`, agentproto.ProtocolVersion)
	return []frame{
		{"past-the-bound", binary.BigEndian.AppendUint32(nil, agentproto.MaxFrame+1)},
		{"not-json", framed(`{"hello":`)},
		{"prepare-before-hello", framed(`{"prepare":{"command":"ADD","containerID":"x","ifName":"eth0"}}`)},
		{"two-messages", framed(`{"hello":` + hello + `,"commit":{}}`)},
		{"half-a-frame", append(binary.BigEndian.AppendUint32(nil, 100), `{"hello":`...)},
	}
}

// sendMalformed sends data on a new connection and wants an answer with an error, then the
// connection closed by the agent.
func sendMalformed(t *testing.T, data []byte) {
	t.Helper()
	c, err := net.Dial("unix", agentSocket())
	e2etest.Must(t, err)
	defer c.Close()
	// A bound on a hung agent, not a speed assertion: its own waits are a second or two.
	e2etest.Must(t, c.SetDeadline(time.Now().Add(time.Minute)))
	_, err = c.Write(data)
	e2etest.Must(t, err)
	var prefix [4]byte
	if _, err := io.ReadFull(c, prefix[:]); err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body := make([]byte, min(binary.BigEndian.Uint32(prefix[:]), agentproto.MaxFrame))
	_, err = io.ReadFull(c, body)
	e2etest.Must(t, err)
	var resp struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || resp.Error == "" {
		t.Errorf("answer %s (%v): want an error", body, err)
	}
	t.Logf("answered: %s", resp.Error)
	if n, err := c.Read(prefix[:]); !errors.Is(err, io.EOF) {
		t.Errorf("after the error the connection is still open: read %d bytes, %v", n, err)
	}
}

// maxPods is the kubelet's default pod limit, the node size the issue measures the agent at.
const maxPods = 110

// agentMemoryBound is the bound on the agent's memory with maxPods pods on its node.
const agentMemoryBound = 50 << 20

// TestAgentMemoryWith110Pods: the node holds maxPods pods (the DaemonSets' included): 20
// with a device as eth0 through the agent (devplumb alone in the conflist), then the rest on
// the cluster network (the bridge) only, all of them in the agent's watch of its node's
// pods. The agent's own memory (anonymous resident pages: heap, stacks, caches; what grows
// with the node's pods) then stays within the 50 MiB. Its whole RSS is logged: it
// adds the pages of the 70 MB devplumbctl binary mapped from the image (about 42 MiB here;
// shared with the page cache, reclaimable), which put it at about 55 MiB. (Not under Multus
// thick: on this 2-core machine its daemon's PodResources calls time out with 110 pods.)
func TestAgentMemoryWith110Pods(t *testing.T) {
	deployed(t)
	names := stormDevices(t)
	waitAgent(t)
	e2etest.Must(t, nd.SetConflist(ctx(t), "agent-mem", hostDeviceConflist("agent-mem", "example.com/storm", "192.0.2.50/24")))
	t.Cleanup(func() { e2etest.Must(t, nd.SetConflist(context.Background(), "cluster", []byte(node.DefaultConflist))) })
	attached := createBurst(t, "mem", len(names), map[string]string{"example.com/storm": "1"})
	for _, p := range attached {
		waitRunning(t, p)
	}
	// The running pods keep their eth0; the rest get the bridge.
	e2etest.Must(t, nd.SetConflist(ctx(t), "cluster", []byte(node.DefaultConflist)))
	fill := maxPods - podsOnNode(t)
	if fill < 0 {
		t.Fatalf("the node already holds %d pods", podsOnNode(t))
	}
	fillers := createBurst(t, "fill", fill, nil)
	all := append(attached, fillers...)
	for _, p := range all {
		waitRunning(t, p)
	}
	if n := podsOnNode(t); n != maxPods {
		t.Errorf("%d pods on the node, want %d", n, maxPods)
	}
	mem := memoryOf(t, agentPid(t))
	rss := mem["VmRSS"]
	t.Logf("the agent's memory with %d pods on its node: VmRSS %.1f MiB (anonymous %.1f, file %.1f), VmHWM %.1f MiB",
		maxPods, mib(rss), mib(mem["RssAnon"]), mib(mem["RssFile"]), mib(mem["VmHWM"]))
	_, body := scrapeAgent(t)
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "go_memstats_heap_inuse_bytes ") || strings.HasPrefix(l, "go_memstats_sys_bytes ") ||
			strings.HasPrefix(l, "go_goroutines ") {
			t.Logf("agent metric %s", l)
		}
	}
	if own := mem["RssAnon"]; own > agentMemoryBound {
		t.Errorf("the agent holds %.1f MiB of its own (anonymous) memory with %d pods on its node, want at most %d MiB", mib(own), maxPods, agentMemoryBound>>20)
	}
	// Each pod's DEL goes to the network it was added with (the runtime runs the current config).
	deleteAll(t, fillers)
	e2etest.Must(t, nd.SetConflist(ctx(t), "agent-mem", hostDeviceConflist("agent-mem", "example.com/storm", "192.0.2.50/24")))
	deleteAll(t, attached)
	waitDevicesBack(t, names)
}

// podsOnNode counts the pods bound to the node that count against its pod limit: those
// not terminating and not ended.
func podsOnNode(t *testing.T) int {
	t.Helper()
	pods, err := nd.Client.CoreV1().Pods("").List(ctx(t), metav1.ListOptions{FieldSelector: "spec.nodeName=devplumb-node"})
	e2etest.Must(t, err)
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	return n
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// memoryOf is the process's /proc status memory lines (VmRSS, RssAnon, ...) in bytes.
func memoryOf(t *testing.T, pid int) map[string]int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	e2etest.Must(t, err)
	out := map[string]int64{}
	for _, l := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if v, isKB := strings.CutSuffix(strings.TrimSpace(v), " kB"); ok && isKB {
			kb, err := strconv.ParseInt(v, 10, 64)
			e2etest.Must(t, err)
			out[k] = kb << 10
		}
	}
	if out["VmRSS"] == 0 {
		t.Fatalf("/proc/%d/status has no VmRSS:\n%s", pid, data)
	}
	return out
}

// deleteAll deletes the pods at once, then waits until each is gone.
func deleteAll(t *testing.T, pods []*corev1.Pod) {
	t.Helper()
	one := int64(1)
	for _, p := range pods {
		err := nd.Client.CoreV1().Pods(p.Namespace).Delete(ctx(t), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &one})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		deletePod(t, p)
	}
}
