package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

// P7's cluster: what the bench creates in the API server beside its own node's 110 pods.
const (
	clusterNodes  = 5000
	clusterPods   = 20000 // the bench node's 110 among them
	clusterSlices = 5000  // one per node, the bench node's among them
	clusterNS     = "p7"
	clusterDriver = "p7.bench.example.com"
	// clusterWorkers create the objects at once: the bench makes 30,000 of them.
	clusterWorkers = 32
)

const p7Title = "P7: a cluster's worth of objects: an ADD through the agent with 5,000 Nodes, 20,000 pods and 5,000 ResourceSlices in the API server"

// p7 measures ADD+DEL through the agent (network-status written) on an API server holding
// only the bench node's objects, then again after the bench made a cluster's worth of
// Nodes, pods and ResourceSlices (no kubelets), with the agent running throughout: what
// its watches carried while the cluster was made, and its memory.
func p7(cfg Config, r *Report) error {
	if cfg.kube == nil || cfg.Agent == "" {
		r.Tables = append(r.Tables, Table{Title: p7Title, Notes: []string{"Not run: P7 needs a kube-apiserver (-kube) and devplumb-agent (-agent)."}})
		return nil
	}
	e, err := newEnvWithPods(cfg, podresourcesserver.Config{NoRateLimit: true}, agentBurstPods, 1)
	if err != nil {
		return err
	}
	defer e.close()
	c, err := newClusterRun(e)
	if err != nil {
		return err
	}
	defer c.proxy.close()
	defer c.agent.stop() // first: its watches hold the proxy's connections
	if err := c.measure("one node"); err != nil {
		return err
	}
	c.proxy.take()
	made, took, err := makeCluster(cfg)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the watches' last events
	population := c.proxy.take()
	if c.nodePods, err = countNodePods(cfg); err != nil {
		return err
	}
	if err := c.measure("cluster"); err != nil {
		return err
	}
	r.Tables = append(r.Tables, c.table(made, took), c.trafficTable(population, made))
	return nil
}

// clusterRun is P7's node: the agent (its API traffic through a counting proxy), the
// network and the figures of each phase.
type clusterRun struct {
	e       *env
	proxy   *trafficProxy
	agent   *agentProc
	netns   string
	floor   map[string][]float64 // phase -> ADD+DEL of bridge alone
	agentMs map[string][]float64 // phase -> ADD+DEL through the agent
	memory  map[string][2]float64
	// nodePods are bench-node's pods in the API server.
	nodePods int
	held     map[string]string // phase -> the objects its watches hold (its metrics)
}

func newClusterRun(e *env) (*clusterRun, error) {
	c := &clusterRun{e: e, floor: map[string][]float64{}, agentMs: map[string][]float64{}, memory: map[string][2]float64{},
		held: map[string]string{}}
	for i := range agentBurstPods { // the node's pods, as the kubelet would have them
		if _, err := e.cfg.kube.pod(podName(i)); err != nil {
			return nil, err
		}
	}
	var err error
	if c.proxy, err = newTrafficProxy(e.cfg.kube.srv.URL); err != nil {
		return nil, err
	}
	kc := filepath.Join(e.dir, "proxied.kubeconfig")
	if err := os.WriteFile(kc, []byte(kubeapi.Kubeconfig(c.proxy.URL, e.cfg.kube.srv.Token)), 0o600); err != nil {
		c.proxy.close()
		return nil, err
	}
	conf := e.devplumbConf("p7", "10.130.0.0/24", filepath.Join(e.dir, "state"))
	conf["kubeconfig"] = kc
	floor := e.bridge("10.130.1.0/24")
	floor["cniVersion"], floor["name"] = "1.0.0", "p7floor"
	for _, n := range []map[string]any{conf, floor} {
		if err := e.writeNet(n); err != nil {
			c.proxy.close()
			return nil, err
		}
	}
	if c.netns, err = e.newNetns(); err == nil {
		c.agent, err = e.startAgent("agent", append(agentFlags(e.cfg, kc), e.nodeConfigFlag("p7")...)...)
	}
	if err != nil {
		c.proxy.close()
		return nil, err
	}
	return c, nil
}

// measure runs cfg.Runs ADD+DEL cycles of pod-0 through the agent, alternating with the
// bridge alone, and takes the agent's memory.
func (c *clusterRun) measure(phase string) error {
	const warmup = 2
	for i := range warmup + c.e.cfg.Runs {
		for _, n := range []struct {
			net string
			env []string
			ms  map[string][]float64
		}{{"p7floor", nil, c.floor}, {"p7", []string{c.agent.env()}, c.agentMs}} {
			d, err := cycle(c.e, &variant{net: n.net, pod: podName(0), netns: c.netns, env: n.env})
			if err != nil {
				return fmt.Errorf("P7 %s: %w", phase, err)
			}
			if i >= warmup {
				n.ms[phase] = append(n.ms[phase], Ms(d))
			}
		}
	}
	rss, peak, err := c.agent.memory()
	c.memory[phase] = [2]float64{rss, peak}
	if err != nil {
		return err
	}
	c.held[phase], err = c.heldObjects()
	return err
}

// heldObjects is what the agent's metrics say its watches hold, e.g. "pod 110, resourceslice 1".
func (c *clusterRun) heldObjects() (string, error) {
	text, err := c.agent.scrape()
	if err != nil {
		return "", err
	}
	held, err := metricValues(text, "devplumb_agent_cached_objects", "kind")
	if err != nil {
		return "", err
	}
	return describeCounts(held), nil
}

// describeCounts is counts as "a 1, b 2", sorted by key.
func describeCounts(counts map[string]float64) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %g", k, counts[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (c *clusterRun) table(made int64, took time.Duration) Table {
	t := Table{Title: p7Title, Header: []string{"", "one node (only its own pods)", "cluster", "cluster ÷ one node"}}
	one, all := Summarize(c.agentMs["one node"]), Summarize(c.agentMs["cluster"])
	f1, f2 := Summarize(c.floor["one node"]), Summarize(c.floor["cluster"])
	t.Rows = [][]string{
		{"ADD+DEL through the agent, network-status written", one.Format("ms"), all.Format("ms"), fmt.Sprintf("%.2f", all.Median/one.Median)},
		{"bridge + host-local alone, alternating with it", f1.Format("ms"), f2.Format("ms"), fmt.Sprintf("%.2f", f2.Median/f1.Median)},
		{"through the agent ÷ bridge alone", fmt.Sprintf("%.2f", one.Median/f1.Median), fmt.Sprintf("%.2f", all.Median/f2.Median),
			fmt.Sprintf("%.2f", (all.Median/f2.Median)/(one.Median/f1.Median))},
		{"objects the agent's watches hold (its metrics, devplumb_agent_cached_objects)", c.held["one node"], c.held["cluster"], "–"},
		{"agent resident memory (peak)", fmt.Sprintf("%.1f MiB (%.1f)", c.memory["one node"][0], c.memory["one node"][1]),
			fmt.Sprintf("%.1f MiB (%.1f)", c.memory["cluster"][0], c.memory["cluster"][1]), fmt.Sprintf("%.2f", c.memory["cluster"][0]/c.memory["one node"][0])},
	}
	t.Notes = []string{"Targets (issue 24): an ADD through the agent within 1.1 × the one-node figure; the agent at most 50 MiB with 110 pods on its node.",
		fmt.Sprintf("Between the two columns the bench created %d objects: %d Nodes (bench-node among them), %d pods in namespace %s spread over the other nodes, %d ResourceSlices of driver %s (one per node, bench-node's among them), with %d concurrent creates in %s (no kubelets, no scheduler); with bench-node's own pods, made before (%d: its 110, and those earlier steps made), the API server holds %d pods. The agent ran throughout, started before, its API requests through a counting proxy. Rows alternate each sample with the bridge alone, whose own drift the third row takes out.",
			made, clusterNodes, clusterPods-agentBurstPods, clusterNS, clusterSlices, clusterDriver, clusterWorkers, took.Round(time.Second), c.nodePods, clusterPods-agentBurstPods+c.nodePods),
	}
	return t
}

// trafficTable is what the agent asked the API server and received while the cluster was made.
func (c *clusterRun) trafficTable(t map[string]traffic, made int64) Table {
	tb := Table{Title: "P7: the agent's API traffic while the bench made the cluster", Header: []string{"request", "requests", "watch events", "received"},
		Rows: trafficRows(t)}
	if len(tb.Rows) == 0 {
		tb.Rows = [][]string{{"none", "0", "0", "0 KiB"}}
	}
	tb.Notes = []string{fmt.Sprintf("Target (issue 24): the agent's watches carry only its node's objects. Of the %d objects made, bench-node's own are its ResourceSlice and its Node (its 110 pods existed before). Requests counted by kind at a TLS proxy the agent's kubeconfig points to: WATCH, LIST or GET (one object) with the selector that scopes it; events are those the watches delivered while the objects were made; received, the bytes of the responses.", made)}
	return tb
}

// makeCluster creates the cluster's Nodes, pods and ResourceSlices with clusterWorkers
// concurrent creates (without client-side rate limit) and returns how many it made.
func makeCluster(cfg Config) (int64, time.Duration, error) {
	rc := rest.CopyConfig(cfg.kube.srv.Config)
	rc.QPS, rc.Burst = 1e6, 1e6 // the API server's own limits, not client-go's, apply
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := cfg.kube.srv.CreateNamespace(ctx, clusterNS); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	jobs := make(chan func() error)
	var made atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for range clusterWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range jobs {
				if err := job(); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					continue
				}
				made.Add(1)
			}
		}()
	}
	feedCluster(ctx, client, jobs)
	close(jobs)
	wg.Wait()
	cfg.logf("   made %d objects in %s", made.Load(), time.Since(start).Round(time.Millisecond))
	return made.Load(), time.Since(start), firstErr
}

// feedCluster sends the create of every object: the Nodes first (bench-node among them),
// then the slices and pods interleaved.
func feedCluster(ctx context.Context, c kubernetes.Interface, jobs chan<- func() error) {
	send := func(f func() error) bool {
		select {
		case jobs <- f:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for i := range clusterNodes {
		if !send(func() error { return createNode(ctx, c, clusterNode(i)) }) {
			return
		}
	}
	others := clusterPods - agentBurstPods
	for i := range max(others, clusterSlices) {
		if i < clusterSlices && !send(func() error { return createSlice(ctx, c, clusterNode(i)) }) {
			return
		}
		if i < others && !send(func() error { return createPod(ctx, c, i) }) {
			return
		}
	}
}

// clusterNode is the i-th node: bench-node first.
func clusterNode(i int) string {
	if i == 0 {
		return kubeNodeName
	}
	return fmt.Sprintf("p7-node-%d", i)
}

func createNode(ctx context.Context, c kubernetes.Interface, name string) error {
	_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create Node %s: %w", name, err)
	}
	return nil
}

// createPod creates the i-th pod of the other nodes (spread over them, never bench-node).
func createPod(ctx context.Context, c kubernetes.Interface, i int) error {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: clusterNS, Name: fmt.Sprintf("p7-pod-%d", i)},
		Spec: corev1.PodSpec{NodeName: clusterNode(1 + i%(clusterNodes-1)),
			Containers: []corev1.Container{{Name: "main", Image: "busybox", ImagePullPolicy: corev1.PullNever}}}}
	if _, err := c.CoreV1().Pods(clusterNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s: %w", p.Name, err)
	}
	return nil
}

// createSlice creates node's ResourceSlice of the cluster's driver: one device.
func createSlice(ctx context.Context, c kubernetes.Interface, node string) error {
	id := "nic-0"
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + clusterDriver},
		Spec: resourcev1.ResourceSliceSpec{Driver: clusterDriver, NodeName: &node,
			Pool:    resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: id, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"deviceID": {StringValue: &id}}}}}}
	if _, err := c.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ResourceSlice %s: %w", s.Name, err)
	}
	return nil
}

// countNodePods counts the pods of bench-node in the API server.
func countNodePods(cfg Config) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := cfg.kube.srv.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + kubeNodeName})
	if err != nil {
		return 0, fmt.Errorf("list the pods of %s: %w", kubeNodeName, err)
	}
	return len(l.Items), nil
}
