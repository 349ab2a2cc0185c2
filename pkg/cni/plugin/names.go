package plugin

import (
	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cni/config"
)

// names are what an attachment's network and CNI device-info file are
// called. They follow from the config, the pod's namespace and the CNI
// arguments alone, so that DEL names things as ADD did.
type names struct {
	conf                *config.NetConf
	podNamespace        string
	containerID, ifName string
	deviceInfo          *devinfo.Store
}

// cniFile is the attachment's CNI device-info file: the caller's
// runtimeConfig.CNIDeviceInfoFile, else the deterministic name DEL can rebuild.
func (n *names) cniFile() (string, error) {
	if f := n.conf.RuntimeConfig.CNIDeviceInfoFile; f != "" {
		return f, nil
	}
	return n.deviceInfo.CNIPath(devinfo.CNIFileName(n.network(), n.containerID, n.ifName))
}

// network names the attachment's network in network-status and in the CNI
// device-info file's name. Multus names a network after its NetworkAttachmentDefinition,
// "<namespace>/<name>" (the file "<namespace>-<name>-<containerID>_<ifname>"); devplumb
// does the same when it has one, so the pod's annotation and the node's files read the
// same under Multus and without it. Else it is the config's name.
func (n *names) network() string {
	if !n.fromNAD() {
		return n.conf.Name
	}
	ns, name := n.conf.NADRef(n.podNamespace)
	if ns == "" {
		return n.conf.Name // no pod namespace to complete the reference with
	}
	return ns + "/" + name
}

// fromNAD: the config names a NetworkAttachmentDefinition, or takes its resourceName
// from one (no resourceName, claim or device given, a kubeconfig to read the NAD with:
// finder.resourceName's rule). It depends on the config alone, so DEL names things as ADD did.
func (n *names) fromNAD() bool {
	return n.conf.NAD != "" || (n.conf.ResourceName == "" && n.conf.ResourceClaim == "" &&
		n.conf.DeviceIDFromConfig() == "" && n.conf.Kubeconfig != "")
}

// legacyCNIFile is the CNI device-info file an older devplumb, which named every file
// after the config's name, made for this attachment; "" when that is today's name.
func (n *names) legacyCNIFile() string {
	if n.conf.RuntimeConfig.CNIDeviceInfoFile != "" || n.network() == n.conf.Name {
		return ""
	}
	p, err := n.deviceInfo.CNIPath(devinfo.CNIFileName(n.conf.Name, n.containerID, n.ifName))
	if err != nil {
		return ""
	}
	return p
}
