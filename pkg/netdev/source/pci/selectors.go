package pci

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs"
)

// Selectors choose devices with the SR-IOV network device plugin's
// selectors and meanings: an empty list matches everything, a device must
// match every non-empty list and every set flag.
type Selectors struct {
	Vendors      []string `json:"vendors,omitempty"`      // "8086"
	Devices      []string `json:"devices,omitempty"`      // "154c"
	Drivers      []string `json:"drivers,omitempty"`      // "iavf", "vfio-pci"
	PCIAddresses []string `json:"pciAddresses,omitempty"` // "0000:01:00.1"
	ACPIIndexes  []string `json:"acpiIndexes,omitempty"`  // the firmware's acpi_index, "101"
	// PFNames select VFs by their PF's netdev name, RootDevices by their
	// PF's PCI address; "ens1f0" is every VF of the PF, "ens1f0#0,2-7"
	// those of the given indexes (0-based, ranges inclusive). A PF itself
	// never matches them (select it by pciAddresses).
	PFNames     []string `json:"pfNames,omitempty"`
	RootDevices []string `json:"rootDevices,omitempty"`
	LinkTypes   []string `json:"linkTypes,omitempty"` // "ether", "infiniband"
	// IsRDMA selects devices with an RDMA device (their own, or soft-RoCE on
	// their netdev) and gives the container its /dev/infiniband nodes.
	IsRDMA bool `json:"isRdma,omitempty"`
	// NeedVhostNet gives the container /dev/vhost-net and /dev/net/tun.
	NeedVhostNet bool `json:"needVhostNet,omitempty"`
	// VDPAType selects devices with a vDPA device bound to that bus driver
	// ("vhost" or "virtio"); the device-info is then of type vdpa.
	VDPAType string `json:"vdpaType,omitempty"`
	// AuxTypes select auxiliary devices by the type in their name
	// (<driver>.<type>.<id>); only "sf" (subfunctions), as the SR-IOV device
	// plugin. Set from that plugin's config (deviceType auxNetDevice) only.
	AuxTypes []string `json:"-"`
}

// hexID is how sysfs IDs are compared: four lower-case hex digits, no "0x".
var hexID = regexp.MustCompile(`^[0-9a-f]{4}$`)

// Validate refuses what can never match (sysfs shows "0x8086"; selectors
// take "8086"), which would leave the source silently empty, empty names,
// malformed VF ranges and contradicting flags.
func (sel Selectors) Validate() error {
	if err := sel.validateForms(); err != nil {
		return fmt.Errorf("pci source: %w", err)
	}
	for what, list := range map[string][]string{"pfNames": sel.PFNames, "rootDevices": sel.RootDevices} {
		if _, err := parsePFList(list); err != nil {
			return fmt.Errorf("pci source: %s: %w", what, err)
		}
	}
	if sel.VDPAType != "" && sel.VDPAType != devinfo.VdpaDriverVhost && sel.VDPAType != devinfo.VdpaDriverVirtio {
		return fmt.Errorf("pci source: vdpaType %q is not %q or %q", sel.VDPAType, devinfo.VdpaDriverVhost, devinfo.VdpaDriverVirtio)
	}
	if sel.VDPAType != "" && sel.IsRDMA {
		return fmt.Errorf("pci source: isRdma and vdpaType exclude each other")
	}
	return nil
}

func (sel Selectors) validateForms() error {
	for what, ids := range map[string][]string{"vendors": sel.Vendors, "devices": sel.Devices} {
		for _, id := range ids {
			if !hexID.MatchString(id) {
				return fmt.Errorf("%s: %q is not a PCI ID of four lower-case hex digits without 0x, like \"8086\"", what, id)
			}
		}
	}
	for _, a := range sel.PCIAddresses {
		if !sysfs.IsAddress(a) {
			return fmt.Errorf("pciAddresses: %q is not a PCI address in lower-case domain:bus:device.function form, like \"0000:01:00.1\"", a)
		}
	}
	for _, i := range sel.ACPIIndexes {
		if n, err := strconv.ParseUint(i, 10, 32); err != nil || strconv.FormatUint(n, 10) != i {
			return fmt.Errorf("acpiIndexes: %q is not an ACPI index (a decimal number as sysfs acpi_index shows it, like \"101\")", i)
		}
	}
	for what, names := range map[string][]string{"drivers": sel.Drivers, "linkTypes": sel.LinkTypes} {
		if slices.Contains(names, "") {
			return fmt.Errorf("%s: empty name", what)
		}
	}
	return nil
}

// pfEntry is one pfNames or rootDevices entry: a PF and the VF indexes it
// selects (nil: all).
type pfEntry struct {
	pf    string
	spans [][2]int
}

// parsePFList parses entries like "ens1f0" or "ens1f0#0,2-7". A PF named
// twice is refused: the SR-IOV device plugin silently uses only the first
// entry, and a config that relies on that is a mistake either way.
func parsePFList(list []string) ([]pfEntry, error) {
	var out []pfEntry
	seen := map[string]bool{}
	for _, s := range list {
		e, err := parsePF(s)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		if seen[strings.ToLower(e.pf)] {
			return nil, fmt.Errorf("%q: PF %s is named twice; give its VFs in one entry, like \"%s#0,2-7\"", s, e.pf, e.pf)
		}
		seen[strings.ToLower(e.pf)] = true
		out = append(out, e)
	}
	return out, nil
}

func parsePF(s string) (pfEntry, error) {
	pf, ranges, hasRanges := strings.Cut(s, "#")
	if pf == "" {
		return pfEntry{}, fmt.Errorf("no PF before the VF ranges")
	}
	e := pfEntry{pf: pf}
	if !hasRanges {
		return e, nil
	}
	for _, r := range strings.Split(ranges, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		first, err1 := strconv.ParseUint(lo, 10, 16)
		last, err2 := first, error(nil)
		if isRange {
			last, err2 = strconv.ParseUint(hi, 10, 16)
		}
		switch {
		case err1 != nil || err2 != nil:
			return pfEntry{}, fmt.Errorf("VF range %q is not an index or first-last of 0-based indexes, like 0,2-7", r)
		case last < first:
			return pfEntry{}, fmt.Errorf("VF range %q ends before it starts", r)
		}
		e.spans = append(e.spans, [2]int{int(first), int(last)})
	}
	return e, nil
}

// selects tells whether an entry list holds a VF of index idx of a PF
// known by any of names (compared without case, as the SR-IOV device
// plugin does).
func selects(entries []pfEntry, names []string, idx int) bool {
	for _, e := range entries {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, e.pf) }) {
			continue
		}
		if e.spans == nil {
			return true
		}
		for _, sp := range e.spans {
			if idx >= sp[0] && idx <= sp[1] {
				return true
			}
		}
	}
	return false
}
