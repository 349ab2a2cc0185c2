// The network-status entry is built here, with the meaning the NAD client's
// utils.CreateNetworkStatuses gives it for a non-default network, rather than by
// that package: it also holds the NAD clientset and helpers on corev1.Pod, whose
// initialisers (the scheme of every Kubernetes API group) would run at every CNI
// call of devplumb; the entry itself is a few lines.

package plugin

import (
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
)

// networkStatus is the network-status entry of network for the sandbox interface ifName of
// result: its MAC, MTU and the IPs the result assigns to it. A result with one
// interface, or none named ifName in the sandbox, gives one entry over the whole
// result, named ifName (a delegate may report no sandbox interface at all).
func networkStatus(result types.Result, network, ifName string, info *nadv1.DeviceInfo) (*nadv1.NetworkStatus, error) {
	r, err := current.NewResultFromResult(result)
	if err != nil {
		return nil, fmt.Errorf("convert the CNI result to version %s: %w", current.ImplementedSpecVersion, err)
	}
	base := nadv1.NetworkStatus{Name: network, Gateway: gateways(r), DNS: dns(r.DNS), DeviceInfo: info}
	if len(r.Interfaces) != 1 {
		if e := sandboxEntry(r, base, ifName); e != nil {
			return e, nil
		}
	}
	e := base
	e.Interface = ifName
	for _, iface := range r.Interfaces {
		if iface.Sandbox != "" { // the last sandbox interface, as the NAD client does
			e.Mac, e.Mtu = iface.Mac, iface.Mtu
		}
	}
	for _, ip := range r.IPs {
		e.IPs = append(e.IPs, ip.Address.IP.String())
	}
	return &e, nil
}

// sandboxEntry is the entry of the sandbox interface ifName of a result with several
// interfaces, or nil. IPs without an interface index go to the last sandbox interface.
func sandboxEntry(r *current.Result, base nadv1.NetworkStatus, ifName string) *nadv1.NetworkStatus {
	idx, last := -1, -1
	for i, iface := range r.Interfaces {
		if iface.Sandbox == "" {
			continue
		}
		last = i
		if iface.Name == ifName && idx < 0 {
			idx = i
		}
	}
	if idx < 0 {
		return nil
	}
	e := base
	iface := r.Interfaces[idx]
	e.Interface, e.Mac, e.Mtu, e.IPs = iface.Name, iface.Mac, iface.Mtu, []string{}
	for _, ip := range r.IPs {
		if (ip.Interface != nil && *ip.Interface == idx) || (ip.Interface == nil && idx == last) {
			e.IPs = append(e.IPs, ip.Address.IP.String())
		}
	}
	return &e
}

// gateways are the gateways of the result's default routes.
func gateways(r *current.Result) []string {
	var out []string
	for _, route := range r.Routes {
		if isDefault(route) {
			out = append(out, route.GW.String())
		}
	}
	return out
}

func isDefault(route *types.Route) bool {
	return route.Dst.IP == nil && route.Dst.Mask == nil || route.Dst.IP.Equal(net.IPv4zero) || route.Dst.IP.Equal(net.IPv6zero)
}

// dns copies the result's DNS, with empty lists rather than nil ones (as the NAD
// client writes them).
func dns(d types.DNS) nadv1.DNS {
	return nadv1.DNS{
		Nameservers: append([]string{}, d.Nameservers...),
		Domain:      d.Domain,
		Search:      append([]string{}, d.Search...),
		Options:     append([]string{}, d.Options...),
	}
}
