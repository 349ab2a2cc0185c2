package kubeletsim

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devplumb/devplumb/pkg/base/resourcename"
)

// validateVersion accepts what the kubelet supports (v1beta1), with the
// kubelet's wording.
func validateVersion(v string) error {
	if !slices.Contains(pluginapi.SupportedVersions[:], v) {
		return fmt.Errorf("requested API version %q is not supported by kubelet. Supported versions are %q",
			v, pluginapi.SupportedVersions)
	}
	return nil
}

// validateEndpoint keeps the plugin socket inside the plugin directory: the
// kubelet joins the endpoint to its socket dir, so it must be a plain name.
func validateEndpoint(ep string) error {
	switch {
	case ep == "":
		return fmt.Errorf("endpoint is empty: it must name the plugin's socket file in the device plugin directory")
	case ep != filepath.Base(ep) || ep == "." || ep == "..":
		return fmt.Errorf("endpoint %q must be a file name in the device plugin directory, not a path", ep)
	case ep == "kubelet.sock":
		return fmt.Errorf("endpoint %q is the kubelet's own socket", ep)
	}
	return nil
}

// validateSpec checks a pod before anything is allocated.
func validateSpec(spec PodSpec) error {
	if errs := validation.IsDNS1123Label(spec.Namespace); len(errs) > 0 {
		return fmt.Errorf("pod namespace %q: %s", spec.Namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(spec.Name); len(errs) > 0 {
		return fmt.Errorf("pod name %q: %s", spec.Name, strings.Join(errs, "; "))
	}
	seen := map[string]bool{}
	for i, c := range spec.Containers {
		if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
			return fmt.Errorf("container %d name %q: %s", i, c.Name, strings.Join(errs, "; "))
		}
		if seen[c.Name] {
			return fmt.Errorf("container name %q used twice", c.Name)
		}
		seen[c.Name] = true
		if err := validateRequests(c); err != nil {
			return err
		}
	}
	return validateClaims(spec)
}

// ValidateRequestName checks the resource name of a container's request: a
// device plugin's, or deviceclass.resource.kubernetes.io/<class>, by which a
// pod asks for the devices of a DeviceClass (KEP-5004; only DRA serves it).
func ValidateRequestName(res string) error {
	class, ok := strings.CutPrefix(res, resourceapi.ResourceDeviceClassPrefix)
	if !ok {
		return resourcename.Validate(res)
	}
	if errs := validation.IsDNS1123Subdomain(class); len(errs) > 0 {
		return fmt.Errorf("resource %q: DeviceClass name %q: %s", res, class, strings.Join(errs, "; "))
	}
	return nil
}

func validateRequests(c ContainerSpec) error {
	seen := map[string]bool{}
	for _, r := range c.Requests {
		if err := ValidateRequestName(r.Resource); err != nil {
			return fmt.Errorf("container %q: %w", c.Name, err)
		}
		if r.Count < 1 {
			return fmt.Errorf("container %q: count of %s must be at least 1, got %d", c.Name, r.Resource, r.Count)
		}
		if seen[r.Resource] {
			return fmt.Errorf("container %q requests %s twice", c.Name, r.Resource)
		}
		seen[r.Resource] = true
	}
	return nil
}
