// Package sriovdp reads the SR-IOV network device plugin's config.json
// (k8snetworkplumbingwg/sriov-network-device-plugin, v3.11.0) as it is and
// turns each of its resources into a netdev-dp resource with the same name
// and devices: resourceList with resourceName, resourcePrefix (else the
// -resource-prefix default), deviceType netDevice or accelerator,
// excludeTopology, additionalInfo, and selectors as one object or a list
// tried in order. A device goes to the first resource (in file order) that
// selects it. deviceType auxNetDevice serves the subfunctions (auxTypes
// "sf") that sit on network PCI functions. It also builds the environment
// a container of such a resource gets (PCIDEVICE_<PREFIX>_<NAME> and its
// _INFO).
//
// Stricter than the plugin, on purpose: a key it does not know, a selector
// it cannot honour here (ddpProfiles, pKeys), or a selector that does not
// apply to the deviceType is refused at start naming the resource, where
// the plugin ignores it and serves a wider or empty pool.
package sriovdp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/devplumb/devplumb/pkg/netdev/resources"
	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
)

// DefaultPrefix is the plugin's -resource-prefix default.
const DefaultPrefix = "intel.com"

// Config is the plugin's config file.
type Config struct {
	ResourceList []ResourceConfig `json:"resourceList"`
}

// ResourceConfig is one resource of the plugin's config.
type ResourceConfig struct {
	ResourcePrefix  string                       `json:"resourcePrefix,omitempty"`
	ResourceName    string                       `json:"resourceName"`
	DeviceType      string                       `json:"deviceType,omitempty"`
	ExcludeTopology bool                         `json:"excludeTopology,omitempty"`
	Selectors       json.RawMessage              `json:"selectors,omitempty"`
	AdditionalInfo  map[string]map[string]string `json:"additionalInfo,omitempty"`
}

// The plugin's device types.
const (
	NetDevice    = "netDevice"
	Accelerator  = "accelerator"
	AuxNetDevice = "auxNetDevice"
)

// IsConfig tells a plugin config from netdev-dp's own by its shape: a JSON
// object with "resourceList" at the top.
func IsConfig(data []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return false
	}
	_, ok := top["resourceList"]
	return ok
}

// Parse decodes and checks a plugin config and translates it into
// netdev-dp's, with defaultPrefix for resources without resourcePrefix.
// The directories stay empty: flags and defaults give them.
func Parse(data []byte, defaultPrefix string) (*resources.Config, error) {
	if err := notMixed(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("SR-IOV device plugin config%s: %w", resources.Position(data, err), err)
	}
	if dec.More() {
		return nil, fmt.Errorf("SR-IOV device plugin config: trailing data after the config object")
	}
	out, err := c.Translate(defaultPrefix)
	if err != nil {
		return nil, fmt.Errorf("SR-IOV device plugin config: %w", err)
	}
	return out, nil
}

// notMixed refuses a file holding both formats' resource lists: which one
// would be served is a guess, and each would take the other's devices.
func notMixed(data []byte) error {
	var top map[string]json.RawMessage
	if json.Unmarshal(data, &top) != nil {
		return nil // Parse names the syntax error with its position
	}
	_, own := top["resources"]
	_, theirs := top["resourceList"]
	if own && theirs {
		return fmt.Errorf("config holds both netdev-dp's \"resources\" and the SR-IOV device plugin's \"resourceList\": " +
			"a config file is one or the other (move the resources of one into a file of its own, or translate them)")
	}
	return nil
}

// deviceType is the plugin's default for "".
func deviceType(t string) string {
	if t == "" {
		return NetDevice
	}
	return t
}

// resourceNameRE is the plugin's rule for resourceName.
var resourceNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Translate turns every resource into a netdev-dp resource; each one's pool
// leaves out the devices of the resources before it.
func (c *Config) Translate(defaultPrefix string) (*resources.Config, error) {
	if len(c.ResourceList) == 0 {
		return nil, fmt.Errorf("resourceList: at least one resource is required")
	}
	out := &resources.Config{}
	var earlier []pci.Pool
	for i, rc := range c.ResourceList {
		r, err := rc.translate(defaultPrefix)
		if err != nil {
			return nil, fmt.Errorf("resourceList[%d] (%s): %w", i, rc.ResourceName, err)
		}
		r.SRIOVDP.Pool.Taken = earlier
		p := r.SRIOVDP.Pool
		earlier = append(earlier, pci.Pool{Accelerator: p.Accelerator, Aux: p.Aux, Selectors: p.Selectors})
		out.Resources = append(out.Resources, r)
	}
	if err := out.Validate(); err != nil {
		return nil, err
	}
	return out, nil
}

func (rc *ResourceConfig) translate(defaultPrefix string) (resources.Resource, error) {
	if !resourceNameRE.MatchString(rc.ResourceName) {
		return resources.Resource{}, fmt.Errorf("resourceName %q: want letters, digits, _ and - only", rc.ResourceName)
	}
	prefix := rc.ResourcePrefix
	if prefix == "" {
		prefix = defaultPrefix
	}
	pool := pci.Pool{ExcludeTopology: rc.ExcludeTopology}
	switch rc.DeviceType {
	case "", NetDevice:
	case Accelerator:
		pool.Accelerator = true
	case AuxNetDevice:
		pool.Aux = true
	default:
		return resources.Resource{}, fmt.Errorf("deviceType %q: want %s, %s or %s", rc.DeviceType, NetDevice, Accelerator, AuxNetDevice)
	}
	var err error
	if pool.Selectors, err = parseSelectors(rc.Selectors, deviceType(rc.DeviceType)); err != nil {
		return resources.Resource{}, err
	}
	for key := range rc.AdditionalInfo {
		if key != "*" && !sysfs.IsAddress(key) {
			return resources.Resource{}, fmt.Errorf("additionalInfo: key %q is neither \"*\" nor a PCI address like \"0000:01:00.1\"", key)
		}
	}
	return resources.Resource{
		ResourceName: prefix + "/" + rc.ResourceName,
		SRIOVDP:      &resources.SRIOVDP{Pool: pool, Prefix: prefix, Name: rc.ResourceName, AdditionalInfo: rc.AdditionalInfo},
	}, nil
}
