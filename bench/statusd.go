package bench

// The least a meta-plugin that writes the pod's network-status before ADD returns can
// cost here: bench/passthrough with "statusSocket" hands each call's result to this
// daemon, which keeps a warm client and makes one merge PATCH of the annotation per
// ADD before it answers; a DEL is answered first and its PATCH made after, as devplumb's
// agent does. With a DRA claim it also applies the claim's status.devices[] entry, at
// the same time as an ADD's PATCH, and takes it away before a DEL answers (as devplumb
// must: its field manager is the device's). No read, no precondition, no record, the
// claim's device given: nothing devplumb must do for its guarantees. P1's rows for it
// are the references of devplumb's network-status and DRA rows.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	resourceclient "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"

	current "github.com/containernetworking/cni/pkg/types/100"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/devplumb/devplumb/bench/statuscall"
	"github.com/devplumb/devplumb/pkg/cni/kube"
)

// statusDaemon serves statuscall.Calls on a unix socket with a warm metadata client.
type statusDaemon struct {
	ln     net.Listener
	pods   metadata.Interface
	claims resourceclient.ResourceV1Interface
	wg     sync.WaitGroup
}

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// startStatusDaemon serves socket with a client of kubeconfig until close.
func startStatusDaemon(kubeconfig, socket string) (*statusDaemon, error) {
	d, err := newStatusClient(kubeconfig)
	if err != nil {
		return nil, err
	}
	if d.ln, err = net.Listen("unix", socket); err != nil {
		return nil, fmt.Errorf("status daemon: %w", err)
	}
	d.wg.Go(d.accept)
	return d, nil
}

// newStatusClient is a status daemon's client of kubeconfig, serving no socket: the
// idle agent's writes (idleagent.go), in its own process.
func newStatusClient(kubeconfig string) (*statusDaemon, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("status daemon: %w", err)
	}
	// devplumb's limits: client-go's default 5 QPS throttled the daemon's writes once
	// cycles came faster than 2.5 a second (each makes two, a DRA one four).
	cfg.QPS, cfg.Burst = kube.QPS, kube.Burst
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("status daemon: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("status daemon: %w", err)
	}
	return &statusDaemon{pods: mc, claims: cs.ResourceV1()}, nil
}

func (d *statusDaemon) accept() {
	for {
		conn, err := d.ln.Accept()
		if err != nil {
			return // closed
		}
		d.wg.Go(func() { d.serve(conn) })
	}
}

// serve answers one call: an ADD after its writes; a DEL after the claim's entry is
// gone, before the pod's.
func (d *statusDaemon) serve(conn net.Conn) {
	defer conn.Close()
	var c statuscall.Call
	if err := json.NewDecoder(conn).Decode(&c); err != nil {
		answer(conn, err)
		return
	}
	if !c.Add {
		answer(conn, d.claimStatus(c, nil))
		_ = d.patch(c, nil) // the entry goes after DEL answers; P1 checks nothing of it
		return
	}
	answer(conn, d.add(c))
}

func answer(conn net.Conn, err error) {
	if err != nil {
		fmt.Fprintf(conn, "error: %v\n", err)
		return
	}
	fmt.Fprintln(conn, "ok")
}

// add writes c's network-status entry, made from its result as devplumb makes it, and
// its claim's status entry at the same time.
func (d *statusDaemon) add(c statuscall.Call) error {
	r, err := cniversion.NewResult("1.0.0", c.Result)
	if err != nil {
		return fmt.Errorf("result: %w", err)
	}
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return fmt.Errorf("result: %w", err)
	}
	entries, err := nadutils.CreateNetworkStatuses(r, c.Network, false, nil)
	if err != nil {
		return err
	}
	var claimErr error
	var wg sync.WaitGroup
	wg.Go(func() { claimErr = d.claimStatus(c, res) })
	err = d.patch(c, entries)
	wg.Wait()
	return errors.Join(err, claimErr)
}

// claimStatus applies c's claim's status.devices[] entry with the interface of res (nil:
// no entry, which removes the one applied before); nothing without a claim.
func (d *statusDaemon) claimStatus(c statuscall.Call, res *current.Result) error {
	if c.Claim == nil {
		return nil
	}
	status := resourceapply.ResourceClaimStatus()
	if res != nil {
		data := resourceapply.NetworkDeviceData()
		for _, i := range res.Interfaces {
			if i.Sandbox != "" {
				data.WithInterfaceName(i.Name).WithHardwareAddress(i.Mac)
				break
			}
		}
		for _, ip := range res.IPs {
			data.WithIPs(ip.Address.String())
		}
		status.WithDevices(resourceapply.AllocatedDeviceStatus().WithDriver(c.Claim.Driver).WithPool(c.Claim.Pool).
			WithDevice(c.Claim.Device).WithNetworkData(data))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := d.claims.ResourceClaims(c.Namespace).ApplyStatus(ctx, resourceapply.ResourceClaim(c.Claim.Name, c.Namespace).WithStatus(status),
		metav1.ApplyOptions{FieldManager: "bench-statusd", Force: true})
	return err
}

// patch sets the pod's network-status annotation to entries (none: removes it) in one
// merge PATCH.
func (d *statusDaemon) patch(c statuscall.Call, entries []*nadv1.NetworkStatus) error {
	var value any // null removes the annotation
	if len(entries) > 0 {
		b, err := json.MarshalIndent(entries, "", "    ")
		if err != nil {
			return err
		}
		value = string(b)
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{nadv1.NetworkStatusAnnot: value}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = d.pods.Resource(podsResource).Namespace(c.Namespace).Patch(ctx, c.Pod, ktypes.MergePatchType, body, metav1.PatchOptions{})
	return err
}

// close stops serving and waits for the calls under way.
func (d *statusDaemon) close() {
	if d.ln != nil {
		_ = d.ln.Close()
	}
	d.wg.Wait()
}
