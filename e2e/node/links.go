package node

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// deleteLink deletes a link by name; a missing one is fine.
func deleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("node: link %s: %w", name, err)
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("node: delete link %s: %w", name, err)
	}
	return nil
}

// addServiceAddress puts addr on a link of its own (a veth pair: this kernel may lack the
// dummy link type), so the API server can serve on the cluster's first service address:
// what the pods' KUBERNETES_SERVICE_HOST names, which host-network pods reach without
// kube-proxy. The address is local: nothing leaves the machine.
func addServiceAddress(link, addr string) error {
	_ = deleteLink(link)
	d := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link}, PeerName: link + "p"}
	if err := netlink.LinkAdd(d); err != nil {
		return fmt.Errorf("node: add link %s: %w", link, err)
	}
	a, err := netlink.ParseAddr(addr)
	if err == nil {
		err = netlink.AddrAdd(d, a)
	}
	if err == nil {
		err = netlink.LinkSetUp(d)
	}
	if err == nil {
		var peer netlink.Link
		if peer, err = netlink.LinkByName(link + "p"); err == nil {
			err = netlink.LinkSetUp(peer)
		}
	}
	if err != nil {
		_ = deleteLink(link)
		return fmt.Errorf("node: address %s on %s: %w", addr, link, err)
	}
	return nil
}
