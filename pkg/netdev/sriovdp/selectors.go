package sriovdp

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/devplumb/devplumb/pkg/netdev/source/pci"
)

// selectors is one selector object of the plugin's config: netdev-dp's pci
// selectors (the same keys) and those it refuses.
type selectors struct {
	pci.Selectors
	DDPProfiles []string `json:"ddpProfiles,omitempty"`
	PKeys       []string `json:"pKeys,omitempty"`
	AuxTypes    []string `json:"auxTypes,omitempty"`
}

// parseSelectors reads "selectors" as a list of objects or one object, as
// the plugin does, and refuses what netdev-dp cannot honour.
func parseSelectors(raw json.RawMessage, accelerator bool) ([]pci.Selectors, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("selectors: required (an object, or a list of objects tried in order)")
	}
	var list []selectors
	if raw[0] == '[' {
		if err := strictDecode(raw, &list); err != nil {
			return nil, fmt.Errorf("selectors: %w", err)
		}
		if len(list) == 0 {
			return nil, fmt.Errorf("selectors: the list is empty")
		}
	} else {
		var one selectors
		if err := strictDecode(raw, &one); err != nil {
			return nil, fmt.Errorf("selectors: %w", err)
		}
		list = []selectors{one}
	}
	out := make([]pci.Selectors, 0, len(list))
	for i, s := range list {
		if err := s.check(accelerator); err != nil {
			return nil, fmt.Errorf("selectors[%d]: %w", i, err)
		}
		out = append(out, s.Selectors)
	}
	return out, nil
}

func strictDecode(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// check refuses the selectors netdev-dp cannot honour and, for
// accelerators, those of network devices.
func (s selectors) check(accelerator bool) error {
	switch {
	case len(s.DDPProfiles) > 0:
		return fmt.Errorf("ddpProfiles: netdev-dp cannot select by DDP profile (it needs Intel's ddptool or devlink DDP); select the VFs by pfNames or pciAddresses instead")
	case len(s.PKeys) > 0:
		return fmt.Errorf("pKeys: netdev-dp cannot select by InfiniBand partition key; select the VFs by pfNames or pciAddresses instead")
	case len(s.AuxTypes) > 0:
		return fmt.Errorf("auxTypes: only for deviceType %s, which netdev-dp does not serve yet", AuxNetDevice)
	}
	if accelerator {
		for _, n := range []struct {
			name string
			set  bool
		}{{"pfNames", len(s.PFNames) > 0}, {"rootDevices", len(s.RootDevices) > 0}, {"linkTypes", len(s.LinkTypes) > 0},
			{"isRdma", s.IsRDMA}, {"needVhostNet", s.NeedVhostNet}, {"vdpaType", s.VDPAType != ""}} {
			if n.set {
				return fmt.Errorf("%s: a selector of network devices, not of deviceType %s", n.name, Accelerator)
			}
		}
	}
	return s.Validate()
}
