// Package resourcename is the one rule for resource names across devplumb: the
// kubelet's for a device plugin's extended resource. The device plugins,
// nodesim and devplumb's config (and a NAD's resourceName annotation) all
// use it, so none accepts a name the kubelet refuses.
package resourcename

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Validate applies the kubelet's rule for the resource of a
// device plugin (v1helper.IsExtendedResourceName), with the kubelet's
// wording, so that a plugin learns at start what the kubelet would refuse:
// domain-qualified, not in the kubernetes.io namespace, not starting with
// "requests.", and "requests."+name a valid qualified name.
func Validate(name string) error {
	invalid := func(why string) error {
		return fmt.Errorf("the ResourceName %q is invalid: %s", name, why)
	}
	switch {
	case !strings.Contains(name, "/"):
		return invalid("an extended resource name must be domain-qualified, like example.com/vf")
	case strings.Contains(name, "kubernetes.io/"):
		return invalid("the kubernetes.io/ namespace is reserved for native resources")
	case strings.HasPrefix(name, "requests."):
		return invalid(`the "requests." prefix is reserved for quota`)
	}
	if errs := validation.IsQualifiedName("requests." + name); len(errs) > 0 {
		return invalid(strings.Join(errs, "; "))
	}
	return nil
}
