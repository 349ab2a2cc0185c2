// Package deviceplugin is a small framework for kubelet device plugins
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1) that any plugin author can use.
//
// A Server serves the DevicePlugin gRPC service for one resource on a unix
// socket in the kubelet's device plugin directory and registers it with the
// kubelet (Registration service on kubelet.sock). The author supplies the
// device list through Update, and a function that builds the per-container
// AllocateResponse; the framework does the rest:
//
//   - ListAndWatch streams the device list and a new list on every change.
//   - GetPreferredAllocation keeps an allocation on one NUMA node when it can
//     and always honours the must-include devices.
//   - Allocate refuses unknown and unhealthy device IDs with InvalidArgument
//     before the author's code runs.
//   - Re-registration is event driven (fsnotify, no polling): the kubelet
//     removes every socket in its directory when it starts and then creates
//     kubelet.sock, so the server re-creates its own socket when it is removed
//     and registers again when kubelet.sock is created. It registers one
//     server once with one kubelet.sock (the file's identity, not the event,
//     decides): kubelet 1.37 refuses a socket it is connected to and then
//     loses track of that connection. Serving again under a live kubelet, it
//     waits for that kubelet to drop the old connection before registering.
//   - A plugin directory that is removed and created again is followed
//     (pkg/base/dirwatch): the plugin serves and registers again in the new one.
//   - A stale socket left by an earlier run is removed before listening, and
//     Run removes the socket when its context ends (graceful stop). A socket
//     that another live plugin serves is never replaced: Run fails instead.
//   - A kubelet that answers the registration with an error (bad version or
//     resource name) ends Run with ErrRegistrationRejected; New already
//     checks the resource name with the kubelet's rule.
package deviceplugin
