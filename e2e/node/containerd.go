package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/devplumb/devplumb/e2e/kubeapi"
)

// The node's images that are not the project's: the sandbox (pause) and the test pods'.
const (
	PauseImage   = "devplumb.test/pause:1"
	BusyboxImage = "devplumb.test/busybox:1"
)

// containerdConfig is containerd 1.7's config: state under the node's dir, CNI and CDI at
// the paths a real node has (mounted from the node's dir in its mount namespace), CDI on.
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
# Not /opt/containerd on the host.
[plugins."io.containerd.internal.v1.opt"]
  path = %[7]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  # This machine (a VM) lacks CAP_SYS_RESOURCE: without this runc fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = ["/var/run/cdi"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
`

// startContainerd writes the config and starts containerd in the node's namespace.
func (n *Node) startContainerd() error {
	n.ContainerdSocket = filepath.Join(n.Dir, "containerd.sock")
	conf := fmt.Sprintf(containerdConfig, filepath.Join(n.Dir, "containerd", "root"),
		filepath.Join(n.Dir, "containerd", "state"), n.ContainerdSocket, n.ContainerdSocket+".ttrpc",
		PauseImage, n.bin.runc, filepath.Join(n.Dir, "containerd", "opt"))
	cf := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	// The shim is found in containerd's PATH.
	env := []string{"PATH=" + n.bin.shimDir + ":" + os.Getenv("PATH")}
	p, err := kubeapi.Spawn(n.Dir, "containerd", "nsenter", n.ns.command(env, n.bin.containerd, "--config", cf)...)
	if err != nil {
		return err
	}
	n.containerd = p
	return n.waitFor("containerd", 2*time.Minute, func() error {
		return n.ctr(context.Background(), "version")
	})
}

// ctr runs ctr against the node's containerd in the Kubernetes namespace.
func (n *Node) ctr(ctx context.Context, args ...string) error {
	argv := append([]string{"-a", n.ContainerdSocket, "-n", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, n.bin.ctr, argv...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ImportImage imports a docker-archive tarball into the node's containerd, as a user
// without a registry does with `ctr -n k8s.io images import`.
func (n *Node) ImportImage(ctx context.Context, tarball string) error {
	if err := n.ctr(ctx, "images", "import", tarball); err != nil {
		return fmt.Errorf("node: import %s: %w", tarball, err)
	}
	return nil
}
