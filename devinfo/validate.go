package devinfo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

var (
	bdfRE     = regexp.MustCompile(`^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:([0-9a-fA-F]{2})\.([0-7])$`)
	versionRE = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
)

// Parse decodes a device-info map and validates it. A JSON error names the
// line and column; a validation error names each key and the rule it breaks.
func Parse(data []byte) (*DeviceInfo, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("parse device-info: empty input")
	}
	var info DeviceInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return nil, fmt.Errorf("parse device-info: %s", describeJSONError(data, err))
	}
	if err := validate(&info, checkKeys(data)); err != nil {
		return nil, err
	}
	return &info, nil
}

// describeJSONError adds the position to a JSON syntax error, and a hint for
// the typographic quotes that documents (the spec among them) are full of.
func describeJSONError(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := position(data, syn.Offset)
		msg := fmt.Sprintf("line %d, column %d: %v", line, col, syn)
		if strings.Contains(syn.Error(), "after object key:value pair") {
			msg += " (a comma missing before it?)"
		}
		if i := bytes.IndexAny(data, "\u201c\u201d\u2018\u2019"); i >= 0 && int64(i) < syn.Offset {
			r, _ := utf8.DecodeRune(data[i:])
			l, c := position(data, int64(i)+1)
			msg += fmt.Sprintf(" (typographic quote %q at line %d, column %d: JSON needs a plain \")", r, l, c)
		}
		return msg
	case errors.As(err, &typ):
		return fmt.Sprintf("key %q: %s is not a valid %s", typ.Field, typ.Value, typ.Type)
	}
	return err.Error()
}

// position turns a byte offset (1-based, as json.SyntaxError gives it: the
// offset after the bad byte) into a line and a column.
func position(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:max(off-1, 0)]
	line = bytes.Count(before, []byte("\n")) + 1
	col = utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return line, col
}

// Validate checks a device-info map against spec section 3: the required keys
// of its type, the type's map present and no other type's map, enumerated
// values, PCI addresses in BDF form, absolute paths, and a 1.0.x or 1.1.x
// version. All problems are reported together, each naming its key.
func Validate(info *DeviceInfo) error {
	return validate(info, nil)
}

// validate is Validate with the errors Parse found in the raw keys first.
func validate(info *DeviceInfo, keyErrs []error) error {
	if info == nil {
		return errors.New("device-info: missing (null)")
	}
	v := &validator{errs: keyErrs}
	v.version(info.Version)
	maps := map[string]bool{
		TypePCI:       info.Pci != nil,
		TypeVDPA:      info.Vdpa != nil,
		TypeVhostUser: info.VhostUser != nil,
		TypeMemif:     info.Memif != nil,
	}
	present, known := maps[info.Type]
	switch {
	case info.Type == "":
		v.add("type", "is required (one of pci, vdpa, vhost-user, memif)")
	case !known:
		v.add("type", fmt.Sprintf("%q is not one of pci, vdpa, vhost-user, memif", info.Type))
	case !present:
		v.add(info.Type, fmt.Sprintf("is required when type is %q", info.Type))
	default:
		v.typeMap(info)
	}
	for _, t := range []string{TypePCI, TypeVDPA, TypeVhostUser, TypeMemif} {
		if maps[t] && t != info.Type {
			v.add(t, fmt.Sprintf("must not be present when type is %q", info.Type))
		}
	}
	if len(v.errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid device-info: %w", errors.Join(v.errs...))
}

type validator struct{ errs []error }

func (v *validator) add(key, rule string) {
	v.errs = append(v.errs, fmt.Errorf("%s: %s", key, rule))
}

func (v *validator) version(s string) {
	m := versionRE.FindStringSubmatch(s)
	switch {
	case s == "":
		v.add("version", "is required (MAJOR.MINOR.PATCH, e.g. "+Version+")")
	case m == nil:
		v.add("version", fmt.Sprintf("%q is not MAJOR.MINOR.PATCH", s))
	case m[1] != "1" || (m[2] != "0" && m[2] != "1"):
		v.add("version", fmt.Sprintf("%q is not supported (1.0.x or 1.1.x)", s))
	}
}

// typeMap checks the map of info's type, which is present.
func (v *validator) typeMap(info *DeviceInfo) {
	switch info.Type {
	case TypePCI:
		v.pci(info.Pci)
	case TypeVDPA:
		v.vdpa(info.Vdpa)
	case TypeVhostUser:
		v.vhostUser(info.VhostUser)
	case TypeMemif:
		v.memif(info.Memif)
	}
}

func (v *validator) pci(p *PciDevice) {
	v.bdf("pci.pci-address", p.PciAddress, true)
	v.bdf("pci.pf-pci-address", p.PfPciAddress, false)
	v.absPath("pci.vhost-net", p.Vhostnet, false)
}

func (v *validator) vdpa(d *VdpaDevice) {
	v.required("vdpa.parent-device", d.ParentDevice)
	v.enum("vdpa.driver", d.Driver, VdpaDriverVhost, VdpaDriverVirtio)
	v.absPath("vdpa.path", d.Path, true)
	v.bdf("vdpa.pci-address", d.PciAddress, false)
	v.bdf("vdpa.pf-pci-address", d.PfPciAddress, false)
}

func (v *validator) vhostUser(d *VhostDevice) {
	v.enum("vhost-user.mode", d.Mode, VhostUserModeClient, VhostUserModeServer)
	v.absPath("vhost-user.path", d.Path, true)
}

func (v *validator) memif(d *MemifDevice) {
	v.enum("memif.role", d.Role, MemifRoleMaster, MemifRoleSlave)
	v.absPath("memif.path", d.Path, true)
	v.enum("memif.mode", d.Mode, MemifModeEthernet, MemifModeIP, MemifModeInjectPunt)
}

func (v *validator) required(key, val string) bool {
	if val == "" {
		v.add(key, "is required")
		return false
	}
	return true
}

func (v *validator) enum(key, val string, allowed ...string) {
	if val == "" {
		v.add(key, "is required (one of "+strings.Join(allowed, ", ")+")")
		return
	}
	for _, a := range allowed {
		if val == a {
			return
		}
	}
	v.add(key, fmt.Sprintf("%q is not one of %s", val, strings.Join(allowed, ", ")))
}

func (v *validator) bdf(key, val string, required bool) {
	if val == "" {
		if required {
			v.add(key, "is required (PCI address dddd:BB:DD.f)")
		}
		return
	}
	m := bdfRE.FindStringSubmatch(val)
	if m == nil {
		v.add(key, fmt.Sprintf("%q is not a PCI address in BDF form dddd:BB:DD.f (hex)", val))
		return
	}
	if dev, _ := strconv.ParseUint(m[1], 16, 8); dev > 0x1f {
		v.add(key, fmt.Sprintf("%q: device number %s is above 1f", val, m[1]))
	}
}

func (v *validator) absPath(key, val string, required bool) {
	switch {
	case val == "":
		if required {
			v.add(key, "is required (an absolute path)")
		}
	case !filepath.IsAbs(val):
		v.add(key, fmt.Sprintf("%q is not an absolute path", val))
	case strings.ContainsRune(val, 0):
		v.add(key, "contains a NUL byte")
	}
}
