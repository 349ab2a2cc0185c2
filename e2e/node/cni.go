package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// SetConflist makes data the node's cluster network (written in place: containerd 1.6
// did not notice a file moved into an empty net.d, and 2.x notices both) and waits until containerd has loaded a config naming network:
// pods created after it returns get that network.
func (n *Node) SetConflist(ctx context.Context, network string, data []byte) error {
	p := filepath.Join(n.HostPath("/etc/cni/net.d"), ConflistName)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return n.WaitNetwork(ctx, network)
}

// WaitNetwork waits until the CNI config containerd loaded names network: the one the
// next pod gets, whoever wrote it (SetConflist, or a CNI's DaemonSet writing its own).
func (n *Node) WaitNetwork(ctx context.Context, network string) error {
	conn, err := grpc.NewClient("unix://"+n.ContainerdSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("node: CRI: %w", err)
	}
	defer conn.Close()
	rs := cri.NewRuntimeServiceClient(conn)
	want := fmt.Sprintf("%q", network)
	return n.waitFor("containerd loading network "+network, time.Minute, func() error {
		st, err := rs.Status(ctx, &cri.StatusRequest{Verbose: true})
		if err != nil {
			return err
		}
		// The verbose status has the loaded CNI config, its sources quoted in JSON.
		if cfg := st.Info["cniconfig"]; !strings.Contains(strings.ReplaceAll(cfg, `\"`, `"`), `"name":`+want) &&
			!strings.Contains(strings.ReplaceAll(cfg, `\"`, `"`), `"name": `+want) {
			return fmt.Errorf("loaded CNI config does not name %s", network)
		}
		return nil
	})
}
