// Package nodeconfig is the node administrator's part of devplumb's
// configuration: every setting that names a host path, a credential or a
// socket, or that switches a check off. A network config reaches devplumb
// from a NetworkAttachmentDefinition's author (through Multus, byte for
// byte), so it may not carry these (docs/security.md, "Trust model"); they
// come from one file whose place only the node decides: $DEVPLUMB_NODE_CONFIG
// in the runtime's environment, else DefaultPath, which the devplumb
// DaemonSet's install container writes.
//
// The package links only the standard library and safefile: the CNI entry
// point reads the file too (to check the agent's answers against it).
package nodeconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/devplumb/devplumb/pkg/base/safefile"
)

// Env names the node config file in the runtime's (or the agent's)
// environment: the node's own setting, as CNI_PATH is. Unset, DefaultPath.
const Env = "DEVPLUMB_NODE_CONFIG"

// DefaultPath is where the install container writes the node config: in the
// directory under the CNI config directory that devplumb owns (runtimes read
// network configs from the top of /etc/cni/net.d only).
const DefaultPath = "/etc/cni/net.d/devplumb.d/node.json"

// Defaults of DESIGN.md.
const (
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	DefaultDeviceInfoDir      = "/var/run/k8s.cni.cncf.io/devinfo"
	DefaultStateDir           = "/var/lib/cni/devplumb"
)

// maxSize bounds the file: a handful of paths.
const maxSize = 64 << 10

// Keys are the settings only a node config may hold: a network config that
// sets one is refused, naming this file.
var Keys = []string{"kubeconfig", "podResourcesSocket", "deviceInfoDir", "stateDir", "logFile", "trustDeviceID"}

// Node is a node config with defaults applied.
type Node struct {
	// Kubeconfig is devplumb's credential; empty: devplumb writes nothing to
	// the API server (network-status is kept in its state only).
	Kubeconfig         string `json:"kubeconfig,omitempty"`
	PodResourcesSocket string `json:"podResourcesSocket,omitempty"`
	DeviceInfoDir      string `json:"deviceInfoDir,omitempty"`
	StateDir           string `json:"stateDir,omitempty"`
	// LogFile, when set, gets every call's log lines too (a file ending in
	// ".log").
	LogFile string `json:"logFile,omitempty"`
	// TrustDeviceID takes a caller's explicit device ID without asking the
	// kubelet whether the pod holds it: only for a node with no kubelet.
	TrustDeviceID bool `json:"trustDeviceID,omitempty"`
}

// Path is the node config the environment names, else DefaultPath.
func Path() string {
	if p := os.Getenv(Env); p != "" {
		return p
	}
	return DefaultPath
}

// Defaults is the node config of a node without the file.
func Defaults() *Node { return Node{}.WithDefaults() }

// WithDefaults is a copy of n with the default of every path it leaves unset.
func (n Node) WithDefaults() *Node {
	n.applyDefaults()
	return &n
}

// Load reads the node config at path. A missing file is the defaults (a node
// where devplumb was installed without its DaemonSet, cnitool); anything
// else that is wrong with it is an error naming the file and the key.
func Load(path string) (*Node, error) {
	if err := checkPath("node config", path); err != nil {
		return nil, fmt.Errorf("%s %s: %w", Env, path, err)
	}
	data, err := safefile.ReadFile(path, maxSize, safefile.Follow)
	if errors.Is(err, fs.ErrNotExist) {
		return Defaults(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("node config: %w", err)
	}
	n, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("node config %s: %w", path, err)
	}
	return n, nil
}

// Parse decodes a node config strictly (an unknown key is a typo that
// would otherwise leave a default in place) and applies the defaults.
func Parse(data []byte) (*Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	n := &Node{}
	if err := dec.Decode(n); err != nil {
		return nil, fmt.Errorf("not a node config (keys %s): %w", strings.Join(Keys, ", "), err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	for _, p := range []struct{ key, val string }{
		{"kubeconfig", n.Kubeconfig}, {"podResourcesSocket", n.PodResourcesSocket},
		{"deviceInfoDir", n.DeviceInfoDir}, {"stateDir", n.StateDir}, {"logFile", n.LogFile},
	} {
		if err := checkPath(p.key, p.val); err != nil {
			return nil, err
		}
	}
	if n.LogFile != "" && !strings.HasSuffix(n.LogFile, ".log") {
		return nil, fmt.Errorf(`"logFile" %q must end in ".log" (no cron, profile or unit directory reads such a file)`, n.LogFile)
	}
	n.applyDefaults()
	return n, nil
}

func (n *Node) applyDefaults() {
	if n.PodResourcesSocket == "" {
		n.PodResourcesSocket = DefaultPodResourcesSocket
	}
	if n.DeviceInfoDir == "" {
		n.DeviceInfoDir = DefaultDeviceInfoDir
	}
	if n.StateDir == "" {
		n.StateDir = DefaultStateDir
	}
}

// checkPath accepts only absolute, clean paths (empty: unset).
func checkPath(key, val string) error {
	switch {
	case val == "":
		return nil
	case !filepath.IsAbs(val):
		return fmt.Errorf("%q %q must be an absolute path", key, val)
	case filepath.Clean(val) != val:
		return fmt.Errorf("%q %q must be a clean path (no \"..\", \".\" or repeated \"/\"): %q", key, val, filepath.Clean(val))
	}
	return nil
}

// CacheDir is libcni's result cache of a devplumb network's delegates: the
// agent answers it, the entry point checks the answer against it, and
// devplumb-direct uses it.
func (n *Node) CacheDir(network string) string {
	return filepath.Join(n.StateDir, "libcni", network)
}
