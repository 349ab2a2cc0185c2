package bench

// The least a meta-plugin that writes the pod's network-status before ADD returns can
// cost here: bench/passthrough with "statusSocket" hands each call's result to this
// daemon, which keeps a warm client and makes one merge PATCH of the annotation per
// ADD before it answers; a DEL is answered first and its PATCH made after, as devplumb's
// agent does. No read, no precondition, no record: nothing devplumb must do for its
// guarantees. P1's row for it is the reference of devplumb's network-status row.

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
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"

	cniversion "github.com/containernetworking/cni/pkg/version"

	"github.com/devplumb/devplumb/bench/statuscall"
)

// statusDaemon serves statuscall.Calls on a unix socket with a warm metadata client.
type statusDaemon struct {
	ln   net.Listener
	pods metadata.Interface
	wg   sync.WaitGroup
}

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// startStatusDaemon serves socket with a client of kubeconfig until close.
func startStatusDaemon(kubeconfig, socket string) (*statusDaemon, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("status daemon: %w", err)
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("status daemon: %w", err)
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("status daemon: %w", err)
	}
	d := &statusDaemon{ln: ln, pods: mc}
	d.wg.Go(d.accept)
	return d, nil
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

// serve answers one call: an ADD after its PATCH, a DEL before it.
func (d *statusDaemon) serve(conn net.Conn) {
	defer conn.Close()
	var c statuscall.Call
	if err := json.NewDecoder(conn).Decode(&c); err != nil {
		fmt.Fprintf(conn, "error: %v\n", err)
		return
	}
	if !c.Add {
		fmt.Fprintln(conn, "ok")
		_ = d.patch(c, nil) // the entry goes after DEL answers; P1 checks nothing of it
		return
	}
	if err := d.add(c); err != nil {
		fmt.Fprintf(conn, "error: %v\n", err)
		return
	}
	fmt.Fprintln(conn, "ok")
}

// add writes c's network-status entry, made from its result as devplumb makes it.
func (d *statusDaemon) add(c statuscall.Call) error {
	r, err := cniversion.NewResult("1.0.0", c.Result)
	if err != nil {
		return fmt.Errorf("result: %w", err)
	}
	entries, err := nadutils.CreateNetworkStatuses(r, c.Network, false, nil)
	if err != nil {
		return err
	}
	return d.patch(c, entries)
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
	if err := d.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return
	}
	d.wg.Wait()
}
