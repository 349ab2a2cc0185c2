package sriovdp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

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
func parseSelectors(raw json.RawMessage, devType string) ([]pci.Selectors, error) {
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
		if err := s.check(devType); err != nil {
			return nil, fmt.Errorf("selectors[%d]: %w", i, err)
		}
		s.Selectors.AuxTypes = s.AuxTypes
		out = append(out, s.Selectors)
	}
	return out, nil
}

func strictDecode(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// check refuses the selectors netdev-dp cannot honour and those that do
// not apply to the deviceType (the plugin ignores them: the pool widens).
func (s selectors) check(devType string) error {
	switch {
	case len(s.DDPProfiles) > 0:
		return fmt.Errorf("ddpProfiles: netdev-dp cannot select by DDP profile (it needs Intel's ddptool or devlink DDP); select the VFs by pfNames or pciAddresses instead")
	case len(s.PKeys) > 0:
		return fmt.Errorf("pKeys: netdev-dp cannot select by InfiniBand partition key; select the VFs by pfNames or pciAddresses instead")
	case len(s.AuxTypes) > 0 && devType != AuxNetDevice:
		return fmt.Errorf("auxTypes: a selector of deviceType %s, not of %s", AuxNetDevice, devType)
	}
	for _, n := range []struct {
		name string
		set  bool
		not  []string // the device types it does not apply to
	}{
		{"pfNames", len(s.PFNames) > 0, []string{Accelerator}},
		{"rootDevices", len(s.RootDevices) > 0, []string{Accelerator}},
		{"linkTypes", len(s.LinkTypes) > 0, []string{Accelerator}},
		{"isRdma", s.IsRDMA, []string{Accelerator}},
		{"needVhostNet", s.NeedVhostNet, []string{Accelerator}},
		{"vdpaType", s.VDPAType != "", []string{Accelerator, AuxNetDevice}},
		{"pciAddresses", len(s.PCIAddresses) > 0, []string{AuxNetDevice}},
		{"acpiIndexes", len(s.ACPIIndexes) > 0, []string{AuxNetDevice}},
	} {
		if n.set && slices.Contains(n.not, devType) {
			return fmt.Errorf("%s: not a selector of deviceType %s", n.name, devType)
		}
	}
	if devType == AuxNetDevice && len(s.AuxTypes) == 0 {
		return fmt.Errorf("auxTypes: required for deviceType %s, like [\"sf\"]", AuxNetDevice)
	}
	for _, t := range s.AuxTypes {
		if t != pci.AuxTypeSF {
			return fmt.Errorf("auxTypes: %q: only %q (subfunctions) is served, as the SR-IOV device plugin", t, pci.AuxTypeSF)
		}
	}
	return s.Selectors.Validate()
}
