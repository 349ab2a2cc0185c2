// Package cdispec writes the Container Device Interface spec file of one
// device plugin resource (KEP-4009): kind = the resource name, one CDI device
// per device with the device nodes and mounts the container needs.
//
// The file is built with the CDI library's types, its cdiVersion is the
// minimum version its content needs (cdi.MinimumRequiredVersion), and before
// it replaces the old file it is read back by the library's own loader
// (cdi.ReadSpec, the validation a runtime applies). The write itself is
// atomic with mode 0644 (pkg/base/atomicfile): the library's own writer leaves
// files 0600, which non-root CDI consumers cannot read.
package cdispec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/devplumb/devplumb/pkg/base/atomicfile"
	"github.com/devplumb/devplumb/pkg/base/safefile"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"
)

// DefaultDir is where runtimes look for dynamically generated CDI specs.
const DefaultDir = "/var/run/cdi"

// Writer owns the spec file of one resource.
type Writer struct {
	dir          string
	resourceName string // also the CDI kind: vendor/class
	path         string
}

// New checks that resourceName is a valid CDI kind and returns its writer.
func New(dir, resourceName string) (*Writer, error) {
	if dir == "" {
		dir = DefaultDir
	}
	vendor, class := parser.ParseQualifier(resourceName)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return nil, fmt.Errorf("CDI kind %q (the resource name): vendor: %w", resourceName, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return nil, fmt.Errorf("CDI kind %q (the resource name): class: %w", resourceName, err)
	}
	name := cdi.GenerateSpecName(vendor, class) + ".json"
	return &Writer{dir: dir, resourceName: resourceName, path: filepath.Join(dir, name)}, nil
}

// Path is the spec file's path.
func (w *Writer) Path() string { return w.path }

// QualifiedName is the fully qualified CDI name of a device, the name that
// goes into cdi_devices and the cdi.k8s.io annotation.
func (w *Writer) QualifiedName(deviceID string) string {
	vendor, class := parser.ParseQualifier(w.resourceName)
	return parser.QualifiedName(vendor, class, DeviceName(deviceID))
}

// DeviceName maps a device ID to a valid CDI device name. A valid ID
// (interface names, PCI addresses, socket names) is kept. Any other ID has
// invalid characters replaced by "-" and a hash of the original ID appended,
// so that two IDs never share a name.
func DeviceName(id string) string {
	if parser.ValidateDeviceName(id) == nil {
		return id
	}
	var b strings.Builder
	for _, r := range id {
		if r < 128 && (parser.IsAlphaNumeric(r) || r == '-' || r == '_' || r == '.') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	name := strings.Trim(b.String(), "-_.")
	if name == "" {
		name = "dev"
	}
	return fmt.Sprintf("%s-%08x", name, h.Sum32())
}

// EnvName is the variable each CDI device sets to its device ID. CDI
// refuses a device without edits, and the variable also tells the container
// which devices the runtime injected: CDI_<RESOURCE>_<DEVICE>, upper case,
// other characters as "_".
func EnvName(resourceName, deviceID string) string {
	return "CDI_" + envPart(resourceName) + "_" + envPart(DeviceName(deviceID))
}

func envPart(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 128 && parser.IsAlphaNumeric(r) {
			return unicode.ToUpper(r)
		}
		return '_'
	}, s)
}

// Build returns the spec for devs (at least one).
func (w *Writer) Build(devs []source.Device) (*cdispecs.Spec, error) {
	if len(devs) == 0 {
		return nil, errors.New("a CDI spec needs at least one device")
	}
	spec := &cdispecs.Spec{Kind: w.resourceName}
	seen := map[string]string{}
	for _, d := range devs {
		name := DeviceName(d.ID)
		if other, dup := seen[name]; dup {
			return nil, fmt.Errorf("device IDs %q and %q map to the same CDI name %q", other, d.ID, name)
		}
		seen[name] = d.ID
		e := edits(d)
		e.Env = append([]string{EnvName(w.resourceName, d.ID) + "=" + d.ID}, d.Env...)
		spec.Devices = append(spec.Devices, cdispecs.Device{Name: name, ContainerEdits: e})
	}
	v, err := cdispecs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI minimum version: %w", err)
	}
	spec.Version = v
	return spec, nil
}

func edits(d source.Device) cdispecs.ContainerEdits {
	var e cdispecs.ContainerEdits
	for _, n := range d.DevNodes {
		dn := &cdispecs.DeviceNode{Path: n.ContainerPath, Permissions: n.Permissions}
		if n.HostPath != n.ContainerPath {
			dn.HostPath = n.HostPath
		}
		e.DeviceNodes = append(e.DeviceNodes, dn)
	}
	for _, m := range d.Mounts {
		opts := []string{"rbind", "rw"}
		if m.ReadOnly {
			opts = []string{"rbind", "ro"}
		}
		e.Mounts = append(e.Mounts, &cdispecs.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: opts, Type: "bind"})
	}
	return e
}

// Write makes the spec file describe devs: validated, atomic, 0644, and only
// when the content changed. With no devices the file is removed, since a CDI
// spec must list at least one device.
func (w *Writer) Write(devs []source.Device) error {
	if len(devs) == 0 {
		return w.Remove()
	}
	spec, err := w.Build(devs)
	if err != nil {
		return fmt.Errorf("CDI spec %s: %w", w.path, err)
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("CDI spec %s: encode: %w", w.path, err)
	}
	data = append(data, '\n')
	// Bounded and never through a link or a FIFO someone left in the
	// shared CDI dir: anything unreadable is simply written over.
	if old, err := safefile.ReadFile(w.path, int64(len(data)), safefile.NoFollow); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := w.validate(data); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(w.path, data, 0o644); err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	return nil
}

// validate loads data with the CDI library's loader from a temporary file
// whose extension the CDI cache ignores.
func (w *Writer) validate(data []byte) error {
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return fmt.Errorf("CDI spec dir %s: %w", w.dir, err)
	}
	tmp, err := os.CreateTemp(w.dir, "."+filepath.Base(w.path)+".validate-*")
	if err != nil {
		return fmt.Errorf("CDI spec %s: %w", w.path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("CDI spec %s: write temp: %w", w.path, err)
	}
	if _, err := cdi.ReadSpec(tmp.Name(), 0); err != nil {
		return fmt.Errorf("CDI spec %s is invalid: %w", w.path, err)
	}
	return nil
}

// Remove deletes the spec file; a missing file is fine.
func (w *Writer) Remove() error {
	if err := os.Remove(w.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CDI spec: %w", err)
	}
	return nil
}
