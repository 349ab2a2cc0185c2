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

// containerdConfig is containerd 2.4's config, version 4: version 3 (containerd 2.0) split
// 1.x's CRI plugin into io.containerd.cri.v1.images and io.containerd.cri.v1.runtime, and
// version 4 (2.4, which migrates older versions at each start with a warning) moved the
// [grpc] and [ttrpc] sections to server plugins. State is under the node's dir, CNI and
// CDI at the paths a real node has (mounted from the node's dir in its mount namespace).
// CDI needs no switch any more (containerd 2 dropped enable_cdi: always on); the
// directories it reads are still ours to name.
const containerdConfig = `version = 4
root = %[1]q
state = %[2]q
[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = %[3]q
  # Named: in version 4 it is no longer derived from the gRPC address.
  [plugins.'io.containerd.server.v1.ttrpc']
    address = %[4]q
  # Not /opt/containerd on the host.
  [plugins.'io.containerd.internal.v1.opt']
    path = %[7]q
  [plugins.'io.containerd.image-verifier.v1.bindir']
    bin_dir = %[8]q
  # NRI is on by default since containerd 2.0 (off in 1.7): it would listen on the host's
  # /var/run/nri/nri.sock, shared with any other runtime there. The node uses no NRI plugin.
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    # The sandbox image (1.x's sandbox_image) is pinned: the kubelet's image GC keeps it.
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %[5]q
  [plugins.'io.containerd.cri.v1.runtime']
    # This machine (a VM) lacks CAP_SYS_RESOURCE: without this runc fails with
    # "can't get final child's PID from pipe: EOF".
    restrict_oom_score_adj = true
    # Where netdev-dp writes its specs (the node's /var/run/cdi, that is /run/cdi).
    cdi_spec_dirs = ["/var/run/cdi"]
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          SystemdCgroup = false
          BinaryName = %[6]q
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/opt/cni/bin"]
      conf_dir = "/etc/cni/net.d"
      max_conf_num = 1
`

// startContainerd writes the config and starts containerd in the node's namespace.
func (n *Node) startContainerd() error {
	n.ContainerdSocket = filepath.Join(n.Dir, "containerd.sock")
	conf := fmt.Sprintf(containerdConfig, filepath.Join(n.Dir, "containerd", "root"),
		filepath.Join(n.Dir, "containerd", "state"), n.ContainerdSocket, n.ContainerdSocket+".ttrpc",
		PauseImage, n.bin.runc, filepath.Join(n.Dir, "containerd", "opt"),
		filepath.Join(n.Dir, "containerd", "image-verifier", "bin"))
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
