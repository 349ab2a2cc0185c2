package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/e2e/kubeapi"
	"github.com/devplumb/devplumb/e2e/node"
	"github.com/devplumb/devplumb/images/imagebuild"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// multusVersion is what scripts/build-multus.sh builds by default, thin and thick.
const multusVersion = "v4.3.0"

// multusMode is how Multus runs on the node.
type multusMode string

const (
	// multusThin: the multus binary in /opt/cni/bin does everything inside the runtime's
	// CNI call, its config (kubeconfig, delegates) in the node's conflist.
	multusThin multusMode = "thin"
	// multusThick: what Multus's own default DaemonSet deploys: multus-shim in
	// /opt/cni/bin forwards each call over a socket to multus-daemon, a pod that runs the
	// delegates (chrooted into the node's /) and talks to the API server as the multus
	// service account, and writes the node's CNI config itself.
	multusThick multusMode = "thick"
)

// multusAsNodeCNI makes Multus, run as mode says, the node's CNI with the bridge (the
// node's cluster network) as the cluster default network, until the test ends.
func multusAsNodeCNI(t *testing.T, mode multusMode) {
	t.Helper()
	if mode == multusThick {
		multusThickAsNodeCNI(t)
		return
	}
	multus, err := kubeapi.FindBinary("DEVPLUMB_MULTUS", "multus-"+multusVersion,
		"build it with scripts/build-multus.sh (make test and make e2e run it)")
	e2etest.Must(t, err)
	e2etest.Must(t, copyExec(multus, nd.HostPath("/opt/cni/bin/multus")))
	var bridge map[string]any
	e2etest.Must(t, json.Unmarshal([]byte(node.DefaultConflist), &bridge))
	conf := map[string]any{"cniVersion": "1.0.0", "name": "multus-cni-network", "plugins": []any{map[string]any{
		"type": "multus", "kubeconfig": nd.API.Kubeconfig, "delegates": []any{bridge},
		"cniDir": "/var/lib/cni/multus", "binDir": "/opt/cni/bin",
	}}}
	data, err := json.Marshal(conf)
	e2etest.Must(t, err)
	useConflist(t, "multus-cni-network", data)
}

// multusThickManifest is Multus v4.3.0's thick DaemonSet as upstream ships it, with the
// few changes its header lists. multus-daemon runs in a pod, as it does for users: the
// shim, the daemon's config manager, its in-cluster credentials and its chroot into the
// node's / are then what they meet.
var multusThickManifest = filepath.Join(testenv.ModuleRoot(), "e2e", "node", "testdata", "multus-thick.yaml")

// multusThickAsNodeCNI applies multusThickManifest and waits until containerd loaded the
// config the daemon writes (00-multus.conf, network multus-cni-network, delegating to
// the first other config of net.d: the node's cluster network). At the end the
// DaemonSet goes and the node's network is its cluster network again.
func multusThickAsNodeCNI(t *testing.T) {
	t.Helper()
	c := ctx(t)
	e2etest.Must(t, nd.ImportImage(c, multusThickImage(t)))
	t.Cleanup(func() { stopMultusThick(t) })
	e2etest.Must(t, nd.Apply(c, multusThickManifest))
	waitDaemonSet(t, "kube-system", "kube-multus-ds")
	e2etest.Must(t, nd.WaitNetwork(c, "multus-cni-network"))
}

// stopMultusThick deletes what multusThickAsNodeCNI applied and waits until the daemon's
// pod is gone and containerd uses the node's cluster network again.
func stopMultusThick(t *testing.T) {
	t.Helper()
	c := context.Background()
	e2etest.Must(t, nd.Delete(c, multusThickManifest))
	waitFor(t, "Multus thick's pod gone", func(c context.Context) error {
		ps, err := nd.Client.CoreV1().Pods("kube-system").List(c, metav1.ListOptions{LabelSelector: "name=multus"})
		if err != nil {
			return err
		}
		if len(ps.Items) > 0 {
			return fmt.Errorf("pods: %s", podStates(c, "kube-system"))
		}
		return nil
	})
	// The daemon removes its config when it stops; it could not if it was killed (a pod
	// that exceeds its grace period), and then no CNI call on the node would work.
	if err := os.Remove(nd.HostPath("/etc/cni/net.d/00-multus.conf")); err == nil {
		t.Errorf("multus-daemon stopped without removing its 00-multus.conf")
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Error(err)
	}
	data, err := os.ReadFile(filepath.Join(nd.HostPath("/etc/cni/net.d"), node.ConflistName))
	e2etest.Must(t, err)
	var conf struct{ Name string }
	e2etest.Must(t, json.Unmarshal(data, &conf))
	e2etest.Must(t, nd.WaitNetwork(c, conf.Name))
}

var (
	thickImageOnce sync.Once
	thickImage     string
	thickImageErr  error
)

// multusThickImage is the multus-thick image of the manifest (made once for the package
// from the binaries scripts/build-multus.sh thick builds: no registry here): multus-daemon
// and multus-shim where upstream's image has them, and busybox for the init container.
func multusThickImage(t *testing.T) string {
	t.Helper()
	thickImageOnce.Do(func() { thickImage, thickImageErr = buildMultusThickImage() })
	e2etest.Must(t, thickImageErr)
	return thickImage
}

func buildMultusThickImage() (string, error) {
	dir := os.Getenv("DEVPLUMB_MULTUS_THICK")
	if dir == "" {
		daemon, err := kubeapi.FindBinary("DEVPLUMB_MULTUS_THICK", filepath.Join("multus-thick-"+multusVersion, "multus-daemon"),
			"build them with scripts/build-multus.sh thick (make test and make e2e run it)")
		if err != nil {
			return "", err
		}
		dir = filepath.Dir(daemon)
	}
	files, err := imagebuild.Busybox("/bin/busybox")
	if err != nil {
		return "", err
	}
	// As in upstream's image (a distribution's base): the runtime names a pod's network
	// namespace /var/run/netns/..., which the daemon checks in its own file system, where
	// the DaemonSet mounts the node's /run/netns.
	files = append(files, imagebuild.File{Path: "/run", Dir: true, Mode: 0o755},
		imagebuild.File{Path: "/var/run", Link: "../run"})
	for _, bin := range []string{"multus-daemon", "multus-shim"} {
		src := filepath.Join(dir, bin)
		if err := imagebuild.CheckStatic(src); err != nil {
			return "", fmt.Errorf("$DEVPLUMB_MULTUS_THICK: %w", err)
		}
		files = append(files, imagebuild.File{Path: "/usr/src/multus-cni/bin/" + bin, Mode: 0o755, Source: src})
	}
	tar := filepath.Join(buildDir, "images", "multus-thick.tar")
	spec := imagebuild.Spec{Ref: "devplumb.test/multus-thick:" + multusVersion, Files: files,
		Entrypoint: []string{"/usr/src/multus-cni/bin/multus-daemon"}}
	return tar, imagebuild.Write(spec, tar)
}
