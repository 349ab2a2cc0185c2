package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/devplumb/devplumb/images"
	"github.com/devplumb/devplumb/images/imagebuild"
)

// CNIPlugins are the plugins the node has in /opt/cni/bin: loopback (containerd sets up
// every sandbox's lo with it), the default network's bridge and host-local, and the
// delegates the tests attach devices with.
var CNIPlugins = []string{
	"github.com/containernetworking/plugins/plugins/main/loopback",
	"github.com/containernetworking/plugins/plugins/main/bridge",
	"github.com/containernetworking/plugins/plugins/main/host-device",
	"github.com/containernetworking/plugins/plugins/main/macvlan",
	"github.com/containernetworking/plugins/plugins/ipam/host-local",
	"github.com/containernetworking/plugins/plugins/ipam/static",
}

// DefaultConflist is the node's cluster network before a test changes it: a bridge.
const DefaultConflist = `{
  "cniVersion": "1.0.0",
  "name": "cluster",
  "plugins": [{
    "type": "bridge", "bridge": "` + bridgeName + `", "isGateway": true, "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.77.0/24"}]]}
  }]
}
`

// ConflistName is the file of the node's cluster network in /etc/cni/net.d.
const ConflistName = "10-cluster.conflist"

// installCNI copies the plugins of binDir into the node's /opt/cni/bin and writes the
// default network.
func (n *Node) installCNI(binDir string) error {
	ents, err := os.ReadDir(binDir)
	if err != nil {
		return fmt.Errorf("node: CNI plugins: %w", err)
	}
	dst := n.HostPath("/opt/cni/bin")
	for _, e := range ents {
		if e.Type().IsRegular() {
			if err := copyFile(filepath.Join(binDir, e.Name()), filepath.Join(dst, e.Name()), 0o755); err != nil {
				return err
			}
		}
	}
	return os.WriteFile(filepath.Join(n.HostPath("/etc/cni/net.d"), ConflistName), []byte(DefaultConflist), 0o644)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("node: copy %s: %w", src, err)
	}
	return out.Close()
}

func (n *Node) importImages(ctx context.Context, tarballs []string) error {
	for _, t := range tarballs {
		if err := n.ImportImage(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

// BuildAll builds, into dir, everything a node needs from the module at root: the CNI
// plugins (dir/cni) and the images — the project's, as `make images` builds them, and the
// node's pause and busybox images. It returns the CNI directory and the tarballs.
func BuildAll(root, dir string) (string, []string, error) {
	cni := filepath.Join(dir, "cni")
	if err := images.GoBuild(root, cni, append(CNIPlugins, "./e2e/node/pause")...); err != nil {
		return "", nil, err
	}
	// Tagged as deployments/ names them, so the shipped manifests run unchanged.
	version, err := images.ShippedVersion(root)
	if err != nil {
		return "", nil, err
	}
	project, err := images.Build(images.Options{Root: root, Out: filepath.Join(dir, "images"), Version: version})
	if err != nil {
		return "", nil, err
	}
	dpRef, ndRef, err := images.Refs(version)
	if err != nil {
		return "", nil, err
	}
	tars := []string{project[dpRef], project[ndRef]}
	bb, err := imagebuild.Busybox("/bin/busybox")
	if err != nil {
		return "", nil, err
	}
	pause := filepath.Join(cni, "pause")
	own := map[string]imagebuild.Spec{
		"pause":   {Ref: PauseImage, Files: append(imagebuild.BaseFiles(), imagebuild.File{Path: "/pause", Mode: 0o755, Source: pause}), Entrypoint: []string{"/pause"}},
		"busybox": {Ref: BusyboxImage, Files: bb, Entrypoint: []string{"/bin/sh"}},
	}
	for name, spec := range own {
		p := filepath.Join(dir, "images", name+".tar")
		if err := imagebuild.Write(spec, p); err != nil {
			return "", nil, err
		}
		tars = append(tars, p)
	}
	if err := os.Remove(pause); err != nil { // not a CNI plugin
		return "", nil, fmt.Errorf("node: %w", err)
	}
	return cni, tars, nil
}

// Logs is the end of each of the node's logs, for a failure message.
func (n *Node) Logs() string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(n.Dir, "*.log"))
	if n.API != nil {
		more, _ := filepath.Glob(filepath.Join(n.API.Dir, "*.log"))
		logs = append(logs, more...)
	}
	for _, l := range logs {
		fmt.Fprintf(&b, "--- %s:\n%s\n", l, tail(l, 15))
	}
	return b.String()
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
