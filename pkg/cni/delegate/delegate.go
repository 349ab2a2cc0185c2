// Package delegate runs devplumb's delegate plugins through libcni, so that
// capabilities, runtimeConfig, prevResult and the result cache behave exactly
// as they do under any container runtime.
package delegate

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/devplumb/devplumb/pkg/base/libcnicache"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// Capability names of the Device Information Spec and Multus.
const (
	CapDeviceID          = "deviceID"
	CapCNIDeviceInfoFile = "CNIDeviceInfoFile"
	// PCIBusIDKey is where Multus (and host-device) put a PCI address.
	PCIBusIDKey = "pciBusID"
)

var pciRE = regexp.MustCompile(`^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// IsPCIAddress reports whether id is a full PCI address (domain:bus:dev.fn).
func IsPCIAddress(id string) bool { return pciRE.MatchString(id) }

// BuildList turns the config's delegate(s) into a conflist with the device
// ID injected into the first plugin. deviceID may be empty (DEL/GC/STATUS
// without state), in which case nothing is injected.
func BuildList(c *config.NetConf, deviceID string) (*libcni.NetworkConfigList, error) {
	name, version := c.Name, c.CNIVersion
	// A lone delegate may set its own name and version; in a chain libcni
	// gives every plugin the list's, as any runtime would.
	if len(c.Delegates) == 1 {
		if s, ok := c.Delegates[0]["name"].(string); ok && s != "" {
			name = s
		}
		if s, ok := c.Delegates[0]["cniVersion"].(string); ok && s != "" {
			version = s
		}
	}
	plugins := make([]map[string]any, 0, len(c.Delegates))
	for i, d := range c.Delegates {
		p := maps.Clone(d)
		// As Multus does, only the first plugin, the one attaching the
		// device, gets the keys; later ones see the device through the
		// capabilities they declare.
		if deviceID != "" && i == 0 {
			for _, k := range c.InjectDeviceID {
				p[k] = deviceID
			}
			if IsPCIAddress(deviceID) {
				p[PCIBusIDKey] = deviceID
			}
		}
		plugins = append(plugins, p)
	}
	return encodeList(name, version, plugins)
}

// BuildShareList is BuildList for a share of a shared device: the first
// delegate (macvlan, or what the NAD names) gets the parent's netdev as its
// "master" in place of the device ID keys, so the share is a sub-interface
// of it.
func BuildShareList(c *config.NetConf, master string) (*libcni.NetworkConfigList, error) {
	list, err := BuildList(c, "")
	if err != nil {
		return nil, err
	}
	var raw struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(list.Bytes, &raw); err != nil || len(raw.Plugins) == 0 {
		return nil, fmt.Errorf("decode delegate conflist: %v", err)
	}
	raw.Plugins[0][ShareMasterKey] = master
	return encodeList(raw.Name, raw.CNIVersion, raw.Plugins)
}

// ShareMasterKey is the key a share's parent netdev goes in (macvlan's).
const ShareMasterKey = "master"

// encodeList makes the conflist of plugins.
func encodeList(name, version string, plugins []map[string]any) (*libcni.NetworkConfigList, error) {
	raw, err := json.Marshal(map[string]any{"cniVersion": version, "name": name, "plugins": plugins})
	if err != nil {
		return nil, fmt.Errorf("encode delegate conflist: %w", err)
	}
	list, err := libcni.NetworkConfFromBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("delegate config is not a valid CNI config: %w", err)
	}
	return list, nil
}

// ListFromBytes reloads a conflist BuildList made (cached in state).
func ListFromBytes(raw []byte) (*libcni.NetworkConfigList, error) {
	list, err := libcni.NetworkConfFromBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("cached delegate config: %w", err)
	}
	return list, nil
}

// CapabilityArgs are the runtime's capability arguments for the delegates:
// every runtimeConfig key devplumb received, plus deviceID and
// CNIDeviceInfoFile. libcni passes each only to plugins declaring it.
func CapabilityArgs(c *config.NetConf, deviceID, cniFile string) map[string]any {
	caps := maps.Clone(c.RuntimeConfig.Raw)
	if caps == nil {
		caps = map[string]any{}
	}
	if deviceID != "" {
		caps[CapDeviceID] = deviceID
	}
	if cniFile != "" {
		caps[CapCNIDeviceInfoFile] = cniFile
	}
	return caps
}

// Invoker runs delegates found on the CNI path.
type Invoker struct {
	cni      *libcni.CNIConfig
	cacheDir string
}

// New returns an Invoker searching cniPath (CNI_PATH, colon separated) and
// keeping libcni's result cache in cacheDir, so nothing is written outside
// devplumb's state directory.
func New(cniPath, cacheDir string) *Invoker { return NewWithExec(cniPath, cacheDir, nil) }

// NewWithExec is New running plugins through exec (libcni's invoke.Exec; nil: real
// processes), so callers' tests can stand in for a delegate without building one.
func NewWithExec(cniPath, cacheDir string, exec invoke.Exec) *Invoker {
	return &Invoker{cni: libcni.NewCNIConfigWithCacheDir(filepath.SplitList(cniPath), cacheDir, exec), cacheDir: cacheDir}
}

// CacheDir is libcni's result cache of one devplumb network: GC of one
// network must never see (and DEL) another network's delegates, even if
// they share a name. The layout is nodeconfig's, which the entry point
// checks the agent's answers against.
func CacheDir(stateDir, network string) string {
	return (&nodeconfig.Node{StateDir: stateDir}).CacheDir(network)
}

// Add runs ADD through the chain. It holds the cache lock shared, so no DEL
// removes the cache directory between libcni creating it and writing the
// result into it.
func (i *Invoker) Add(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (types.Result, error) {
	unlock, err := libcnicache.Lock(i.cacheDir, false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return i.cni.AddNetworkList(ctx, list, rt)
}

// Del runs DEL through the chain in reverse order, then removes the
// network's cache directories if DEL left them empty.
func (i *Invoker) Del(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	if err := i.cni.DelNetworkList(ctx, list, rt); err != nil {
		return err
	}
	i.pruneCache()
	return nil
}

// Check runs CHECK through the chain with the cached ADD result.
func (i *Invoker) Check(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return i.cni.CheckNetworkList(ctx, list, rt)
}

// GC deletes the cached attachments that are not valid and asks the
// delegates to GC (CNI 1.1.0 and later).
func (i *Invoker) GC(ctx context.Context, list *libcni.NetworkConfigList, valid []types.GCAttachment) error {
	return i.cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: valid})
}

// Status asks the delegates for STATUS (CNI 1.1.0 and later).
func (i *Invoker) Status(ctx context.Context, list *libcni.NetworkConfigList) error {
	return i.cni.GetStatusNetworkList(ctx, list)
}
