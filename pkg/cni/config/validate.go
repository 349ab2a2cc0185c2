package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/devplumb/devplumb/pkg/base/resourcename"
	"github.com/devplumb/devplumb/pkg/cni/nodeconfig"
)

// reservedKeys may not be used to inject the device ID: they carry CNI meaning.
var reservedKeys = []string{"cniVersion", "name", "type", "ipam", "dns", "args", "runtimeConfig",
	"capabilities", "prevResult", "cniVersions"}

func (c *NetConf) validate() error {
	checks := []func() error{
		c.validateIdentity, c.validatePaths, c.validateDevice, c.validateDelegates, c.validateMisc, c.validateLog,
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *NetConf) validateIdentity() error {
	if c.CNIVersion == "" {
		return fmt.Errorf(`"cniVersion" is missing: set one of %s`, strings.Join(SupportedVersions, ", "))
	}
	if !slices.Contains(SupportedVersions, c.CNIVersion) {
		return fmt.Errorf(`"cniVersion" %q is not supported: use one of %s`, c.CNIVersion, strings.Join(SupportedVersions, ", "))
	}
	if c.Name == "" {
		return errors.New(`"name" is missing: set the network name`)
	}
	if err := utils.ValidateNetworkName(c.Name); err != nil {
		return fmt.Errorf(`"name" %q is invalid: letters, digits, '_', '.', '-' only, starting with a letter or digit`, c.Name)
	}
	if c.Type == "" {
		return errors.New(`"type" is missing: set it to "devplumb"`)
	}
	return nil
}

// validatePaths checks the one path a network config's caller may give
// (the node config's were checked when it was read).
func (c *NetConf) validatePaths() error {
	return c.checkCNIDeviceInfoFile()
}

// CNIDeviceInfoDirs are the directories a caller-given CNIDeviceInfoFile may
// be in: this config's "<deviceInfoDir>/cni", and the spec's default
// "/var/run/k8s.cni.cncf.io/devinfo/cni", which Multus hard-codes even when
// devplumb's deviceInfoDir differs.
func (c *NetConf) CNIDeviceInfoDirs() []string {
	dirs := []string{filepath.Join(c.DeviceInfoDir, "cni")}
	if def := filepath.Join(DefaultDeviceInfoDir, "cni"); def != dirs[0] {
		dirs = append(dirs, def)
	}
	return dirs
}

// checkCNIDeviceInfoFile keeps a caller-given CNIDeviceInfoFile, which
// devplumb overwrites on ADD and removes on DEL, to a plain file name directly
// in one of CNIDeviceInfoDirs: anything else would let a caller make devplumb
// write or delete an arbitrary file.
func (c *NetConf) checkCNIDeviceInfoFile() error {
	return CheckCNIDeviceInfoFile("runtimeConfig.CNIDeviceInfoFile", c.RuntimeConfig.CNIDeviceInfoFile, c.CNIDeviceInfoDirs())
}

// CheckCNIDeviceInfoFile rejects a CNI device-info file path that is not a
// plain file name directly inside one of dirs. An empty path is fine.
func CheckCNIDeviceInfoFile(key, path string, dirs []string) error {
	if path == "" {
		return nil
	}
	if err := checkPath(key, path); err != nil {
		return err
	}
	if err := checkFileName(key, path); err != nil {
		return err
	}
	if !strings.HasSuffix(path, "/") && slices.Contains(dirs, filepath.Dir(path)) {
		return nil
	}
	return fmt.Errorf("%q %q must be a file directly in %s (where device-info files live; Multus uses the latter)",
		key, path, strings.Join(dirs, " or "))
}

// checkFileName refuses a path that can name no file: a NUL byte, a name
// over 255 bytes or a path over 4095 (Linux's NAME_MAX and PATH_MAX). Such
// a file could never be written at ADD nor removed at DEL.
func checkFileName(key, path string) error {
	switch {
	case strings.ContainsRune(path, 0):
		return fmt.Errorf("%q %q contains a NUL byte: no file can have that name", key, path)
	case len(filepath.Base(path)) > 255:
		return fmt.Errorf("%q %.60q... has a file name of %d bytes: the limit is 255", key, path, len(filepath.Base(path)))
	case len(path) > 4095:
		return fmt.Errorf("%q %.60q... is %d bytes long: the limit is 4095", key, path, len(path))
	}
	return nil
}

// checkPath accepts only absolute, clean paths, so a config can never point
// devplumb outside the directories it names (no "..", no relative paths).
func checkPath(key, val string) error {
	if val == "" {
		return nil
	}
	if !filepath.IsAbs(val) {
		return fmt.Errorf("%q %q must be an absolute path", key, val)
	}
	for _, part := range strings.Split(val, "/") {
		if part == ".." || part == "." {
			return fmt.Errorf("%q %q must not contain %q: give a clean absolute path", key, val, part)
		}
	}
	return nil
}

func (c *NetConf) validateDevice() error {
	if err := CheckResourceName(`"resourceName"`, c.ResourceName); err != nil {
		return err
	}
	if err := c.validateClaim(); err != nil {
		return err
	}
	ids := []struct{ key, val string }{
		{"deviceID", c.DeviceID}, {"pciBusID", c.PCIBusID}, {"runtimeConfig.deviceID", c.RuntimeConfig.DeviceID},
	}
	for _, id := range ids {
		if err := CheckDeviceID(id.key, id.val); err != nil {
			return err
		}
	}
	return nil
}

// validateClaim checks "resourceClaim" and "request": the names the pod
// spec and the claim's spec give them (DNS labels; a request may name a
// subrequest as "request/subrequest"), and what they need: the claim name
// maps to its ResourceClaim only through the pod object, so a kubeconfig.
func (c *NetConf) validateClaim() error {
	if c.Request != "" && c.ResourceClaim == "" {
		return fmt.Errorf(`"request" %q needs "resourceClaim": it names a request of that claim`, c.Request)
	}
	if c.ResourceClaim == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(c.ResourceClaim); len(errs) > 0 {
		return fmt.Errorf(`"resourceClaim" %q must be the claim's name in the pod spec (pod.spec.resourceClaims[].name, a DNS label): %s`,
			c.ResourceClaim, strings.Join(errs, "; "))
	}
	if c.Request != "" {
		for _, part := range strings.SplitN(c.Request, "/", 2) {
			if errs := validation.IsDNS1123Label(part); len(errs) > 0 {
				return fmt.Errorf(`"request" %q must name a request of the claim ("request" or "request/subrequest", DNS labels): %s`,
					c.Request, strings.Join(errs, "; "))
			}
		}
	}
	if c.Kubeconfig == "" {
		return fmt.Errorf(`"resourceClaim" %q needs a "kubeconfig" in the node config (%s): devplumb reads the pod and its ResourceClaim from the API server`,
			c.ResourceClaim, nodeconfig.DefaultPath)
	}
	if c.DeviceID != "" || c.PCIBusID != "" {
		return errors.New(`"resourceClaim" and "deviceID"/"pciBusID" are both set: the device comes from the claim, remove "deviceID"/"pciBusID"`)
	}
	return nil
}

// CheckResourceName rejects a resource name (from the config, or a
// NetworkAttachmentDefinition's annotation) that is not a Kubernetes
// extended resource name, so it can name no file outside deviceInfoDir/dp.
// deviceclass.resource.kubernetes.io/<class>, the name by which a pod asks
// for the devices of a DeviceClass with no extendedResourceName (KEP-5004),
// is one when <class> is a DeviceClass name.
func CheckResourceName(what, res string) error {
	if res == "" {
		return nil
	}
	if class, ok := strings.CutPrefix(res, resourceapi.ResourceDeviceClassPrefix); ok {
		if errs := validation.IsDNS1123Subdomain(class); len(errs) > 0 {
			return fmt.Errorf("%s %q: DeviceClass name %q: %s", what, res, class, strings.Join(errs, "; "))
		}
		return nil
	}
	if err := resourcename.Validate(res); err != nil {
		return fmt.Errorf("%s %q: %w", what, res, err)
	}
	return nil
}

// CheckDeviceID rejects device IDs that could not be part of a file name;
// the kubelet's IDs go through the same check.
func CheckDeviceID(key, id string) error {
	if id == "" {
		return nil
	}
	if !deviceIDRE.MatchString(id) || strings.Contains(id, "..") || len(id) > 253 {
		return fmt.Errorf("%s %q is not a valid device ID (letters, digits and _.:@+- only, no \"..\")", key, id)
	}
	return nil
}

func (c *NetConf) validateDelegates() error {
	if len(c.Delegates) == 0 {
		return errors.New(`"delegates" is empty: list at least one CNI plugin config`)
	}
	for i, d := range c.Delegates {
		where := "delegate"
		if len(c.Delegates) > 1 || d == nil {
			where = fmt.Sprintf("delegates[%d]", i)
		}
		if d == nil {
			return fmt.Errorf("%s is null: give a CNI plugin config object", where)
		}
		t, ok := d["type"].(string)
		if !ok || t == "" {
			return fmt.Errorf(`%s has no string "type": name the CNI plugin to run`, where)
		}
		if !pluginRE.MatchString(t) {
			return fmt.Errorf(`%s "type" %q must be a plugin binary name, not a path`, where, t)
		}
		if t == c.Type {
			return fmt.Errorf(`%s "type" %q is devplumb itself: delegate to the plugin that attaches the device (%w)`, where, t, ErrSelfDelegation)
		}
		for _, k := range []string{"cniVersion", "name"} {
			if v, ok := d[k]; ok {
				if s, isStr := v.(string); !isStr || s == "" {
					return fmt.Errorf("%s %q must be a non-empty string", where, k)
				}
			}
		}
	}
	return nil
}

func (c *NetConf) validateMisc() error {
	if !slices.Contains([]string{NetworkStatusRequired, NetworkStatusBestEffort, NetworkStatusNone}, c.NetworkStatus) {
		return fmt.Errorf(`"networkStatus" %q is invalid: use %q (the default), %q or %q`,
			c.NetworkStatus, NetworkStatusRequired, NetworkStatusBestEffort, NetworkStatusNone)
	}
	if c.Events != EventsFailures && c.Events != EventsAll && c.Events != EventsNone {
		return fmt.Errorf(`"events" %q is invalid: use %q (the default), %q or %q`, c.Events, EventsFailures, EventsAll, EventsNone)
	}
	if c.NAD != "" && !nadRE.MatchString(c.NAD) {
		return fmt.Errorf(`"networkAttachmentDefinition" %q must be "namespace/name" or "name"`, c.NAD)
	}
	for _, k := range c.InjectDeviceID {
		if k == "" || slices.Contains(reservedKeys, k) {
			return fmt.Errorf(`"injectDeviceID" key %q is empty or reserved by CNI: use a key the delegate reads, like "deviceID"`, k)
		}
	}
	return nil
}

// DeviceIDFromConfig is the device given by the caller, first that applies:
// runtimeConfig.deviceID, then the top-level deviceID Multus injects. With
// "resourceClaim" there is none: the config names the claim whose device
// the attachment takes, and a caller's device (Multus injects one for a
// NAD's resourceName annotation) must not bypass it.
func (c *NetConf) DeviceIDFromConfig() string {
	if c.ResourceClaim != "" {
		return ""
	}
	if c.RuntimeConfig.DeviceID != "" {
		return c.RuntimeConfig.DeviceID
	}
	return c.DeviceID
}

// NADRef is the NetworkAttachmentDefinition to ask for a resourceName:
// "networkAttachmentDefinition" when set, else the network name, in the
// pod's namespace unless the reference names one.
func (c *NetConf) NADRef(podNamespace string) (namespace, name string) {
	ref := c.NAD
	if ref == "" {
		ref = c.Name
	}
	if ns, n, ok := strings.Cut(ref, "/"); ok {
		return ns, n
	}
	return podNamespace, ref
}
