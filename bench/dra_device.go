package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/pkg/kubeletsim/podresourcesserver"
)

const p6Title = "P6: a DRA device, from the kubelet (local path) and from the API server (API path), beside a device plugin's"

// p6Variant is one device source of P6: a pod, its network config, and per kept cycle
// the wall time and the API requests of ADD and of DEL.
type p6Variant struct {
	label, short string
	pod          string
	dra          bool // a DRA device: devplumb writes the claim's status
	extended     bool // the pod asks an extended resource a DRA driver serves
	stdin        []byte
	nodeEnv      string // names its node config
	netns        string
	add, del     []float64
	addReq       []map[string]int
	delReq       []map[string]int
}

// p6 measures devplumb's ADD and DEL with a DRA device through the local path and the
// API path against the device plugin path, each with a kubeconfig, and counts the API
// requests each call makes (issue 12: a per-call plugin keeps no informers).
func p6(cfg Config, r *Report) error {
	if cfg.kube == nil {
		r.Tables = append(r.Tables, Table{Title: p6Title,
			Notes: []string{"Not run: P6 needs a kube-apiserver (-kube; make bench runs one)."}})
		return nil
	}
	vs, err := runP6(cfg)
	if err != nil {
		return err
	}
	r.Tables = append(r.Tables, p6Table(vs))
	p := Panel{Title: "P6: devplumb ADD and DEL by device source (direct call, with kubeconfig)", Unit: "ms"}
	for _, v := range vs {
		p.Bars = append(p.Bars, Bar{Label: "ADD " + v.short, S: Summarize(v.add)}, Bar{Label: "DEL " + v.short, S: Summarize(v.del)})
	}
	r.Panels = append(r.Panels, p)
	return nil
}

// runP6 sets the node up as a DRA driver, the scheduler and the kubelet would, and runs
// cfg.Runs kept ADD+DEL cycles of every variant (after two warm-ups, the first of which
// checks that ADD wrote the claim's status entry and DEL removed it), rotating the order.
func runP6(cfg Config) ([]*p6Variant, error) {
	e, err := newEnv(cfg, podresourcesserver.Config{NoRateLimit: true})
	if err != nil {
		return nil, err
	}
	defer e.close()
	rc, err := kubeapi.NewRequestCounter(cfg.kube.srv.URL)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	vs, err := p6Setup(e, rc.URL)
	if err != nil {
		return nil, err
	}
	const warmup = 2
	for round := range warmup + cfg.Runs {
		for i := range vs {
			v := vs[(i+round)%len(vs)]
			if err := v.cycle(e, rc, fmt.Sprintf("p6-%d", round), round >= warmup, round == 0); err != nil {
				return nil, fmt.Errorf("%s: %w", v.label, err)
			}
		}
	}
	return vs, nil
}

// p6Setup publishes the driver's devices, creates the pods and claims, and writes one
// network per variant, each with a kubeconfig for the counting proxy at proxyURL.
func p6Setup(e *env, proxyURL string) ([]*p6Variant, error) {
	kc := filepath.Join(e.dir, "counted.kubeconfig")
	if err := os.WriteFile(kc, []byte(kubeapi.Kubeconfig(proxyURL, e.cfg.kube.srv.Token)), 0o600); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	devs := []draDevice{{"nic-0", "dra-0"}, {"nic-1", "dra-1"}, {"nic-2", "dra-2"}, {"nic-3", "dra-3"}, {"nic-4", "dra-4"}}
	if err := e.draPublish(ctx, devs); err != nil {
		return nil, err
	}
	if err := e.pods.set(1, 1); err != nil { // pod-0: the device plugin's device
		return nil, err
	}
	if _, err := e.cfg.kube.pod(podName(0)); err != nil {
		return nil, err
	}
	vs := []*p6Variant{
		{label: "device plugin (PodResources), no DRA", short: "device plugin", pod: podName(0)},
		{label: "DRA local path: the kubelet reports the claim, config resourceName", short: "DRA local", pod: "dra-local", dra: true},
		{label: "DRA API path: network-only claim the kubelet does not report, config resourceName", short: "DRA API, network-only claim",
			pod: "dra-netonly", dra: true},
		{label: "DRA API path: config resourceClaim", short: "DRA API, resourceClaim", pod: "dra-claim", dra: true},
		{label: "DRA extended resource (limits, KEP-5004), local path: the kubelet reports the scheduler's claim, config resourceName",
			short: "DRA ext. resource local", pod: "dra-ext-local", dra: true, extended: true},
		{label: "DRA extended resource, API path: the claim status.extendedResourceClaimStatus names, config resourceName",
			short: "DRA ext. resource API", pod: "dra-ext-api", dra: true, extended: true},
	}
	for i, v := range vs {
		conf := e.devplumbConf(fmt.Sprintf("p6net%d", i), fmt.Sprintf("10.127.%d.0/24", i), filepath.Join(e.dir, "state"))
		conf["kubeconfig"] = kc
		if err := v.create(ctx, e, devs[max(i-1, 0)]); err != nil {
			return nil, err
		}
		if v.pod == "dra-claim" {
			delete(conf, "resourceName")
			conf["resourceClaim"] = draPodClaim
		}
		var err error
		if v.stdin, v.nodeEnv, err = e.directStdin(conf); err != nil {
			return nil, err
		}
		if v.netns, err = e.newNetns(); err != nil {
			return nil, err
		}
	}
	return vs, nil
}

// create makes the variant's pod and claim (DRA variants), the kubelet reporting the claim
// on the local paths.
func (v *p6Variant) create(ctx context.Context, e *env, dev draDevice) error {
	local := strings.HasSuffix(v.pod, "-local")
	switch {
	case v.extended:
		return e.draExtendedPod(ctx, v.pod, dev, local)
	case v.dra:
		return e.draPod(ctx, v.pod, dev, local)
	}
	return nil
}

// cycle runs ADD then DEL directly, taking the requests each made; check verifies the
// claim's status entry after each.
func (v *p6Variant) cycle(e *env, rc *kubeapi.RequestCounter, containerID string, keep, check bool) error {
	var ms [2]float64
	var reqs [2]map[string]int
	for i, op := range []string{"ADD", "DEL"} {
		rc.Take()
		p, err := runPlugin(e.cfg.Devplumb, append(e.cniEnvFor(op, v.netns, containerID, v.pod, false), v.nodeEnv), v.stdin)
		if err != nil {
			return err
		}
		ms[i], reqs[i] = Ms(p.wall), rc.Take()
		if check && v.dra {
			if err := v.checkStatus(e, op == "ADD"); err != nil {
				return err
			}
		}
	}
	if keep {
		v.add, v.del = append(v.add, ms[0]), append(v.del, ms[1])
		v.addReq, v.delReq = append(v.addReq, reqs[0]), append(v.delReq, reqs[1])
	}
	return nil
}

// checkStatus: after ADD the claim has devplumb's networkData for net1, after DEL none.
func (v *p6Variant) checkStatus(e *env, added bool) error {
	st, err := e.cfg.kube.draDeviceStatus(v.pod)
	switch {
	case err != nil:
		return err
	case added && (st == nil || st.NetworkData.InterfaceName != "net1"):
		return fmt.Errorf("after ADD the claim of pod %s has no networkData for net1: %+v", v.pod, st)
	case !added && st != nil:
		return fmt.Errorf("after DEL the claim of pod %s still has networkData: %+v", v.pod, st)
	}
	return nil
}

// deviceReads are the requests that looked the device up: the pod object, the claim and
// the slices (network-status reads the pod's metadata only, counted apart).
var deviceReads = []string{"GET pods", "GET resourceclaims", "GET resourceslices"}

func p6Table(vs []*p6Variant) Table {
	t := Table{Title: p6Title,
		Header: []string{"device source", "ADD", "DEL", "device reads (ADD)", "API requests per ADD", "per DEL", "connections per call"}}
	for _, v := range vs {
		t.Rows = append(t.Rows, []string{v.label, Summarize(v.add).Format("ms"), Summarize(v.del).Format("ms"),
			countRange(v.addReq, deviceReads...), describeRequests(v.addReq), describeRequests(v.delReq),
			countRange(append(slices.Clone(v.addReq), v.delReq...), kubeapi.Connections)})
	}
	t.Notes = []string{
		"devplumb run directly (as P5), delegating to bridge + host-local, each pod's network with a kubeconfig for a counting TLS proxy in front of the bench's kube-apiserver. The bench plays the DRA driver (a DeviceClass, a ResourceSlice of the node whose devices carry k8s.cni.cncf.io/deviceID and resourceName, the device-info files), the scheduler and the ResourceClaim controller (a claim made from a template, owned by the pod, allocated and reserved for it; the pod's status.resourceClaimStatuses naming it; for an extended resource, the claim the 1.37 scheduler makes, annotated, the pod its controller, request container-0-request-0, and the pod's status.extendedResourceClaimStatus mapping its limit to it) and the kubelet (a PodResources server that reports the claim with its CDI device, or, for a network-only claim, the pod without it).",
		"Every ADD writes network-status (a read of the pod's metadata, GET pods (metadata), and a PATCH; on the API path it starts from the device lookup's read of the pod instead) and, for a DRA device, devplumb's part of the claim's status.devices[] entry (PATCH resourceclaims/status, server-side apply); every DEL removes both. Device reads: what finding the device asked the API server (the pod object, the claim, the slices of one driver on this node). Counts are per call; a range, when they varied over the samples. The proxy adds a hop to every request's time.",
	}
	return t
}

// describeRequests is the requests of one call, e.g. "3: GET pods (metadata) 1, PATCH
// pods 1, PATCH resourceclaims/status 1", each count a range when it varied.
func describeRequests(samples []map[string]int) string {
	var keys []string
	for _, s := range samples {
		for k := range s {
			if k != kubeapi.Connections && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + countRange(samples, k)
	}
	totals := make([]map[string]int, len(samples))
	for i, s := range samples {
		totals[i] = map[string]int{"all": kubeapi.Requests(s)}
	}
	return countRange(totals, "all") + ": " + strings.Join(parts, ", ")
}

// countRange is the sum of keys per sample, as "n" or "min-max" over the samples.
func countRange(samples []map[string]int, keys ...string) string {
	lo, hi := -1, -1
	for _, s := range samples {
		n := 0
		for _, k := range keys {
			n += s[k]
		}
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	switch {
	case lo < 0:
		return "-"
	case lo == hi:
		return fmt.Sprint(lo)
	default:
		return fmt.Sprintf("%d-%d", lo, hi)
	}
}
