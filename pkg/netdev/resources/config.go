package resources

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/base/resourcename"
	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/pkg/netdev/source/link"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/netdev/source/socket"
	"github.com/devplumb/devplumb/pkg/netdev/source/vdpa"
)

// DefaultResync is how often every source is rescanned besides its events.
// sysfs (pci, vdpa) has no change events, so this is their health period.
const DefaultResync = 5 * time.Second

// Config is the netdev-dp config file. Directories given as flags override
// the file's.
type Config struct {
	PluginDir  string          `json:"pluginDir,omitempty"`
	DevInfoDir string          `json:"deviceInfoDir,omitempty"`
	CDIDir     string          `json:"cdiDir,omitempty"`
	SysfsRoot  string          `json:"sysfsRoot,omitempty"`
	Resync     metav1.Duration `json:"resyncInterval,omitempty"` // "5s"; default DefaultResync
	// PodResourcesSocket is the kubelet's PodResources API, which device-plugin
	// mode asks which devices pods hold, at stop and when devices have left
	// the host, to keep their device-info files and CDI spec entries; "" is
	// the kubelet's default socket.
	PodResourcesSocket string     `json:"podResourcesSocket,omitempty"`
	Resources          []Resource `json:"resources"`
}

// Resource is one advertised resource and the one device source that feeds it.
type Resource struct {
	ResourceName string            `json:"resourceName"`
	PCI          *pci.Selectors    `json:"pci,omitempty"`
	NetDevs      *link.Config      `json:"netdevs,omitempty"`
	VDPA         *vdpa.Selectors   `json:"vdpa,omitempty"`
	VhostUser    *socket.VhostUser `json:"vhostUser,omitempty"`
	Memif        *socket.Memif     `json:"memif,omitempty"`
	// Share makes the resource shareable in DRA mode: each device (a netdev,
	// or a PCI function with one) is published once for many claims, each a
	// macvlan sub-interface with a bandwidth (docs/sharing.md).
	Share *netshare.Config `json:"share,omitempty"`
	// PFBandwidth has a pci resource's VFs share their PF's bandwidth in
	// DRA mode (a shared counter each VF consumes part of).
	PFBandwidth *netshare.PFBandwidth `json:"pfBandwidth,omitempty"`
	// SRIOVDP is a resource of the SR-IOV network device plugin's config,
	// which pkg/netdev/sriovdp translates; netdev-dp's own file cannot name it.
	SRIOVDP *SRIOVDP `json:"-"`
}

// SRIOVDP is what a resource of the SR-IOV network device plugin's config
// needs besides its devices' selection: the prefix and name its
// PCIDEVICE_<PREFIX>_<NAME> environment is named after, and the
// additionalInfo its _INFO environment carries.
type SRIOVDP struct {
	Pool         pci.Pool
	Prefix, Name string
	// AdditionalInfo maps "*" (every device) or a PCI address (that device,
	// over "*") to extra key-value pairs.
	AdditionalInfo map[string]map[string]string
}

// maxConfigSize bounds the config file: a real one is a few KiB.
const maxConfigSize = 4 << 20

// LoadConfig reads and checks a config file. Unknown keys are errors. A
// link is followed (a ConfigMap's files are links), but only a regular file
// of at most maxConfigSize is read: a FIFO or /dev/zero is refused at once.
func LoadConfig(path string) (*Config, error) {
	data, err := ReadConfigFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ReadConfigFile reads a config file as LoadConfig does, for a caller that
// parses it another way.
func ReadConfigFile(path string) ([]byte, error) {
	data, err := safefile.ReadFile(path, maxConfigSize, safefile.Follow)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return data, nil
}

// ParseConfig decodes and checks a config.
func ParseConfig(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decode%s: %w", Position(data, err), err)
	}
	if dec.More() {
		return nil, fmt.Errorf("decode: trailing data after the config object")
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Position is " at line L, column C" of the offending byte, for JSON
// errors that know their offset.
func Position(data []byte, err error) string {
	var offset int64
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		offset = syn.Offset
	case errors.As(err, &typ):
		offset = typ.Offset
	default:
		return ""
	}
	// Offset counts the bytes read, the offending one included.
	before := data[:max(0, min(int(offset)-1, len(data)))]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Sprintf(" at line %d, column %d", line, col)
}

// Validate checks everything that can be checked without the host.
func (c *Config) Validate() error {
	if c.Resync.Duration < 0 {
		return fmt.Errorf("resyncInterval %s is negative: give a positive duration like \"5s\"", c.Resync.Duration)
	}
	if len(c.Resources) == 0 {
		return fmt.Errorf("resources: at least one resource is required")
	}
	seen := map[string]bool{}
	for i, r := range c.Resources {
		where := fmt.Sprintf("resources[%d]", i)
		if err := resourcename.Validate(r.ResourceName); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if seen[r.ResourceName] {
			return fmt.Errorf("%s: resource %q is configured twice", where, r.ResourceName)
		}
		seen[r.ResourceName] = true
		if n := r.sourceCount(); n != 1 {
			return fmt.Errorf("%s (%s): exactly one of pci, netdevs, vdpa, vhostUser, memif is required, found %d", where, r.ResourceName, n)
		}
		if r.PCI != nil {
			if err := r.PCI.Validate(); err != nil {
				return fmt.Errorf("%s (%s): %w", where, r.ResourceName, err)
			}
		}
		if err := r.validateShare(); err != nil {
			return fmt.Errorf("%s (%s): %w", where, r.ResourceName, err)
		}
		if err := r.validatePFBandwidth(); err != nil {
			return fmt.Errorf("%s (%s): %w", where, r.ResourceName, err)
		}
	}
	return nil
}

func (r *Resource) sourceCount() int {
	n := 0
	for _, set := range []bool{r.PCI != nil, r.NetDevs != nil, r.VDPA != nil, r.VhostUser != nil, r.Memif != nil, r.SRIOVDP != nil} {
		if set {
			n++
		}
	}
	return n
}

// validateShare checks a shareable resource: its devices must be links a
// macvlan can sit on (netdevs, or PCI functions with a netdev).
func (r *Resource) validateShare() error {
	if r.Share == nil {
		return nil
	}
	if r.NetDevs == nil && r.PCI == nil {
		return fmt.Errorf("share: only netdevs and pci resources can be shared (a share is a macvlan sub-interface of the device's netdev)")
	}
	_, err := r.Share.Validate()
	return err
}

// validatePFBandwidth checks a resource whose VFs share their PF's bandwidth.
func (r *Resource) validatePFBandwidth() error {
	if r.PFBandwidth == nil {
		return nil
	}
	if r.PCI == nil {
		return fmt.Errorf("pfBandwidth: only a pci resource's VFs share a PF's bandwidth")
	}
	if r.Share != nil {
		return fmt.Errorf("pfBandwidth and share: a device is either shared by claims or one VF of a PF, not both")
	}
	_, _, err := r.PFBandwidth.Validate()
	return err
}
