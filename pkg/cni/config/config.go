// Package config parses and validates the devplumb network configuration
// strictly: every key must be one devplumb or the CNI specification knows,
// so a typo in a NetworkAttachmentDefinition fails loudly instead of being
// silently ignored.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// Defaults of DESIGN.md: the node config's (pkg/cni/nodeconfig), where
// the paths are set.
const (
	DefaultPodResourcesSocket = nodeconfig.DefaultPodResourcesSocket
	DefaultDeviceInfoDir      = nodeconfig.DefaultDeviceInfoDir
	DefaultStateDir           = nodeconfig.DefaultStateDir
	DefaultInjectKey          = "deviceID"

	NetworkStatusRequired   = "required"
	NetworkStatusBestEffort = "best-effort"
	// NetworkStatusNone writes no network-status entry (it is still kept in
	// the state record): for a network whose caller writes the whole list
	// (Multus's delegation), on a node whose node config has a kubeconfig.
	NetworkStatusNone = "none"

	// Values of "events": which ADDs leave a Kubernetes Event on the pod.
	// Failures by default: a pod stuck in ContainerCreating then says why in
	// kubectl describe; an Event per successful attachment is one more API
	// write per ADD, which a user opts into.
	EventsFailures = "failures"
	EventsAll      = "all"
	EventsNone     = "none"
)

// SupportedVersions are the CNI versions devplumb accepts in a config.
var SupportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// ErrDecode marks input that is not JSON of the expected shape (CNI code 6);
// every other Parse error is an invalid config (CNI code 7).
var ErrDecode = errors.New("cannot decode network config")

// ErrSelfDelegation is matched (errors.Is) by the error of a config whose delegate's type is
// devplumb's own: ADD refuses it, so a DEL of it has nothing to undo and must not fail.
var ErrSelfDelegation = errors.New("devplumb cannot delegate to itself")

// RuntimeConfig is what the runtime (or Multus) passed through capabilities.
type RuntimeConfig struct {
	DeviceID          string `json:"deviceID,omitempty"`
	CNIDeviceInfoFile string `json:"CNIDeviceInfoFile,omitempty"`
	// Raw keeps every runtimeConfig key, so capabilities devplumb does not
	// know (portMappings, ips, ...) still reach delegates that declare them.
	Raw map[string]any `json:"-"`
}

// ErrNodeKey is matched (errors.Is) by the error of a network config that
// sets a key only the node config may hold (nodeconfig.Keys).
var ErrNodeKey = errors.New("key reserved to the node config")

// NetConf is a validated devplumb network config with defaults applied.
type NetConf struct {
	// Node is the node administrator's part: host paths, the credential and
	// trustDeviceID. It never comes from the network config (whose author
	// may be any namespace user), only from the node config Parse is given.
	nodeconfig.Node `json:"-"`

	CNIVersion   string `json:"cniVersion"`
	Name         string `json:"name"`
	Type         string `json:"type"`
	ResourceName string `json:"resourceName,omitempty"`
	// ResourceClaim is a pod-spec claim name (pod.spec.resourceClaims[].name)
	// whose allocated device this attachment takes (DRA); Request narrows it
	// to one request of the claim.
	ResourceClaim  string          `json:"resourceClaim,omitempty"`
	Request        string          `json:"request,omitempty"`
	NetworkStatus  string          `json:"networkStatus,omitempty"`
	Events         string          `json:"events,omitempty"`
	NAD            string          `json:"networkAttachmentDefinition,omitempty"`
	InjectDeviceID []string        `json:"injectDeviceID,omitempty"`
	Capabilities   map[string]bool `json:"capabilities,omitempty"`
	RuntimeConfig  RuntimeConfig   `json:"-"`
	DeviceID       string          `json:"deviceID,omitempty"`
	PCIBusID       string          `json:"pciBusID,omitempty"`
	DisableCheck   bool            `json:"disableCheck,omitempty"`
	DisableGC      bool            `json:"disableGC,omitempty"`
	// Log control per network, with Multus's keys (see logging.go).
	LogLevel    string `json:"logLevel,omitempty"`
	LogToStderr *bool  `json:"logToStderr,omitempty"`

	// Delegates holds the delegate plugin configs in chain order: one for
	// "delegate", several for "delegates".
	Delegates []map[string]any `json:"-"`
	// ValidAttachments is set on GC (cni.dev/valid-attachments).
	ValidAttachments []types.GCAttachment `json:"-"`
}

// devplumbKeys are the keys devplumb itself defines.
var devplumbKeys = []string{
	"resourceName", "resourceClaim", "request", "networkStatus", "events", "networkAttachmentDefinition",
	"injectDeviceID", "delegate", "delegates", "deviceID", "pciBusID", "logLevel", "logToStderr",
}

// cniKeys are top-level keys the CNI specification (or libcni on GC) may set.
var cniKeys = []string{
	"cniVersion", "cniVersions", "name", "type", "ipam", "dns", "args", "runtimeConfig",
	"capabilities", "prevResult", "disableCheck", "disableGC",
	"cni.dev/valid-attachments", "cni.dev/attachments",
}

var (
	// deviceIDRE admits PCI addresses, netdev names, UUIDs and socket names,
	// but nothing that could leave a directory when used in a file name.
	deviceIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@+-]*$`)
	nadRE      = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]*[a-z0-9])?/)?[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)
	pluginRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
)

// Parse decodes, validates and defaults a devplumb network config, with the
// node's settings from node (nil: the defaults of a node without a node
// config).
func Parse(data []byte, node *nodeconfig.Node) (*NetConf, error) {
	raw := map[string]json.RawMessage{}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDecode, err)
	}
	if err := checkNodeKeys(raw); err != nil {
		return nil, err
	}
	if err := checkKeys(raw); err != nil {
		return nil, err
	}
	if err := checkTopIPAM(raw["ipam"]); err != nil {
		return nil, err
	}
	if node == nil {
		node = nodeconfig.Defaults()
	}
	c := &NetConf{Node: *node.WithDefaults()}
	if err := decodeFields(data, raw, c); err != nil {
		return nil, err
	}
	c.applyDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// checkNodeKeys refuses what only the node's administrator may set: a
// network config's author could otherwise name a credential (a kubeconfig
// whose exec plugin runs as root), a socket or a directory, or switch the
// kubelet check off. The error says where the setting lives now.
func checkNodeKeys(raw map[string]json.RawMessage) error {
	var found []string
	for _, k := range nodeconfig.Keys {
		if _, ok := raw[k]; ok {
			found = append(found, fmt.Sprintf("%q", k))
		}
	}
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("%s may not be set in a network config, whose author (a NetworkAttachmentDefinition's) "+
		"may be any namespace user: remove it, and set it in the node config %s (or the file $%s names), "+
		"which the node's administrator writes (docs/security.md, \"Migrating\") (%w)",
		strings.Join(found, ", "), nodeconfig.DefaultPath, nodeconfig.Env, ErrNodeKey)
}

func checkKeys(raw map[string]json.RawMessage) error {
	known := map[string]bool{}
	for _, k := range append(append([]string{}, devplumbKeys...), cniKeys...) {
		known[k] = true
	}
	var unknown []string
	for k := range raw {
		if !known[k] {
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return fmt.Errorf("unknown top-level key %s in network config: remove it or fix its spelling (devplumb keys: %s)",
		strings.Join(unknown, ", "), strings.Join(devplumbKeys, ", "))
}

// checkTopIPAM refuses an "ipam" at devplumb's own level: devplumb assigns
// no addresses, so one there would be silently ignored. An empty one (or
// null) is harmless and allowed.
func checkTopIPAM(ipam json.RawMessage) error {
	var m map[string]any
	if len(ipam) == 0 || (json.Unmarshal(ipam, &m) == nil && len(m) == 0) {
		return nil
	}
	return errors.New(`"ipam" at the top level is not used by devplumb: move it into "delegate" (or the delegate in "delegates" that assigns addresses)`)
}

func decodeFields(data []byte, raw map[string]json.RawMessage, c *NetConf) error {
	if err := json.Unmarshal(data, c); err != nil {
		return decodeError(err)
	}
	if err := decodeRuntimeConfig(raw["runtimeConfig"], &c.RuntimeConfig); err != nil {
		return err
	}
	if err := decodeDelegates(raw, c); err != nil {
		return err
	}
	for _, k := range []string{"cni.dev/valid-attachments", "cni.dev/attachments"} {
		if v, ok := raw[k]; ok && c.ValidAttachments == nil {
			if err := json.Unmarshal(v, &c.ValidAttachments); err != nil {
				return fmt.Errorf("%w: %q must be a list of {containerID, ifname}: %v", ErrDecode, k, err)
			}
		}
	}
	return nil
}

// decodeError names the offending field of a JSON type mismatch.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%w: key %q must be of type %s, not JSON %s", ErrDecode, te.Field, te.Type, te.Value)
	}
	return fmt.Errorf("%w: %v", ErrDecode, err)
}

func decodeRuntimeConfig(data json.RawMessage, rc *RuntimeConfig) error {
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(data, &rc.Raw); err != nil {
		return fmt.Errorf("%w: \"runtimeConfig\" must be an object: %v", ErrDecode, err)
	}
	if err := json.Unmarshal(data, rc); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%w: key \"runtimeConfig.%s\" must be of type %s, not JSON %s", ErrDecode, te.Field, te.Type, te.Value)
		}
		return fmt.Errorf("%w: runtimeConfig: %v", ErrDecode, err)
	}
	return nil
}

func decodeDelegates(raw map[string]json.RawMessage, c *NetConf) error {
	one, hasOne := raw["delegate"]
	many, hasMany := raw["delegates"]
	switch {
	case hasOne && hasMany:
		return errors.New(`both "delegate" and "delegates" are set: use "delegate" for one plugin or "delegates" for a chain, not both`)
	case !hasOne && !hasMany:
		return errors.New(`no delegate: set "delegate" to the CNI plugin config that attaches the device (or "delegates" for a chain)`)
	case hasOne:
		var d map[string]any
		if err := json.Unmarshal(one, &d); err != nil || d == nil {
			return fmt.Errorf("%w: \"delegate\" must be a JSON object (one CNI plugin config)", ErrDecode)
		}
		c.Delegates = []map[string]any{d}
	default:
		if err := json.Unmarshal(many, &c.Delegates); err != nil {
			return fmt.Errorf("%w: \"delegates\" must be a list of JSON objects (CNI plugin configs)", ErrDecode)
		}
	}
	return nil
}

func (c *NetConf) applyDefaults() {
	if c.NetworkStatus == "" {
		c.NetworkStatus = NetworkStatusRequired
	}
	if c.Events == "" {
		c.Events = EventsFailures
	}
	if c.InjectDeviceID == nil {
		c.InjectDeviceID = []string{DefaultInjectKey}
	}
}
