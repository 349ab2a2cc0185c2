package shape

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// tickInUsec is the kernel's psched ticks per µs (/proc/net/psched), the
// unit of tbf's buffer.
var tickInUsec = netlink.TickInUsec

// IfbName is the ifb link that shapes what the pod receives on ifName, in
// the pod's netns: "dpshape" and a hash of ifName, 15 bytes (IFNAMSIZ-1),
// one per interface of the pod.
func IfbName(ifName string) string {
	sum := sha256.Sum256([]byte(ifName))
	return "dpshape" + hex.EncodeToString(sum[:4])
}

// handles of what Apply makes: tbf at the root, the ingress qdisc.
var (
	rootHandle    = netlink.MakeHandle(1, 0)
	ingressHandle = netlink.MakeHandle(0xffff, 0)
)

// Apply shapes ifName in the netns at netnsPath to s's rate both ways: a
// tbf root qdisc on it (what the pod sends), its ingress redirected to its
// ifb (IfbName) with a tbf root qdisc (what the pod receives). An ifb of
// that name an earlier attachment of ifName left is replaced; a link of
// that name that is no ifb is an error. On error nothing Apply made stays;
// the error names the share and its rate.
func Apply(netnsPath, ifName string, s Spec) error {
	t, err := params(s.Rate)
	if err == nil {
		err = inNetns(netnsPath, func(h *netlink.Handle) error { return apply(h, ifName, t) })
	}
	if err != nil {
		return fmt.Errorf("%s: bandwidth %d bit/s cannot be enforced on %s: %w", s.Share, s.Rate, ifName, err)
	}
	return nil
}

// inNetns runs f with a netlink handle in the netns at path.
func inNetns(path string, f func(*netlink.Handle) error) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, syscall.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in netns %s: %w", path, err)
	}
	defer h.Close()
	return f(h)
}

// apply makes the ifb and the qdiscs; on error it removes what it made.
func apply(h *netlink.Handle, ifName string, t *tbf) (err error) {
	link, err := h.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("find the interface: %w", err)
	}
	ifb, err := addIfb(h, IfbName(ifName), link.Attrs().MTU)
	if err != nil {
		return err
	}
	made := []func() error{func() error { return h.LinkDel(ifb) }} // its qdisc goes with it
	defer func() {
		for i := len(made) - 1; err != nil && i >= 0; i-- {
			_ = made[i]() // the kernel's first error is the one to report
		}
	}()
	if err := h.QdiscAdd(t.qdisc(ifb.Attrs().Index)); err != nil {
		return fmt.Errorf("tbf on ifb %s: %w", ifb.Attrs().Name, err)
	}
	root := t.qdisc(link.Attrs().Index)
	if err := h.QdiscAdd(root); err != nil {
		return fmt.Errorf("tbf on %s: %w", ifName, err)
	}
	made = append(made, func() error { return h.QdiscDel(root) })
	ingress := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: ingressHandle,
		Parent: netlink.HANDLE_INGRESS}}
	if err := h.QdiscAdd(ingress); err != nil {
		return fmt.Errorf("ingress qdisc on %s: %w", ifName, err)
	}
	made = append(made, func() error { return h.QdiscDel(ingress) }) // its filter goes with it
	return redirect(h, link, ifb)
}

// qdisc is t as the root tbf qdisc of the link with index.
func (t *tbf) qdisc(index int) *netlink.Tbf {
	return &netlink.Tbf{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: index, Handle: rootHandle, Parent: netlink.HANDLE_ROOT},
		Rate: t.rate, Limit: t.limit, Buffer: t.buffer}
}

// addIfb makes the ifb, up, after removing one an earlier attachment left
// (a DEL leaves it with the pod's netns; a later ADD of the interface
// comes here again).
func addIfb(h *netlink.Handle, name string, mtu int) (netlink.Link, error) {
	if old, err := h.LinkByName(name); err == nil {
		if old.Type() != "ifb" {
			return nil, fmt.Errorf("the pod's netns has a %s link %s, the name of the ifb devplumb shapes with", old.Type(), name)
		}
		if err := h.LinkDel(old); err != nil {
			return nil, fmt.Errorf("remove the ifb %s an earlier attachment left: %w", name, err)
		}
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MTU = name, mtu
	// No transmit queue: tbf's own limit is the queue (as the bandwidth plugin's ifb).
	attrs.TxQLen = 0
	if err := h.LinkAdd(&netlink.Ifb{LinkAttrs: attrs}); err != nil {
		return nil, fmt.Errorf("add ifb %s: %w", name, err)
	}
	ifb, err := h.LinkByName(name)
	if err == nil {
		err = h.LinkSetUp(ifb)
	}
	if err != nil {
		_ = h.LinkDel(&netlink.Ifb{LinkAttrs: attrs})
		return nil, fmt.Errorf("bring up ifb %s: %w", name, err)
	}
	return ifb, nil
}

// redirect sends everything link receives through ifb: on its ingress
// qdisc, a u32 filter matching all with a mirred egress redirect.
func redirect(h *netlink.Handle, link, ifb netlink.Link) error {
	filter := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: link.Attrs().Index, Parent: ingressHandle, Priority: 1,
			Protocol: syscall.ETH_P_ALL},
		// Egress redirect, the packet stolen from link's path: one action
		// (RedirIndex would add a second one).
		Actions: []netlink.Action{netlink.NewMirredAction(ifb.Attrs().Index)},
	}
	if err := h.FilterAdd(filter); err != nil {
		return fmt.Errorf("redirect %s's ingress to %s (u32, mirred): %w", link.Attrs().Name, ifb.Attrs().Name, err)
	}
	return nil
}

// Remove removes the ifb Apply made for ifName in the netns at netnsPath,
// after the delegates' DEL took the interface (and its qdiscs) away: a DEL
// of an interface whose netns lives on, or the undo of an ADD that failed
// after Apply. A netns or ifb that is gone is no error; a link of that name
// that is no ifb is not devplumb's and stays.
func Remove(netnsPath, ifName string) error {
	if netnsPath == "" {
		return nil // a DEL of a netns already gone
	}
	ns, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return nil // gone, and the ifb with it
	}
	_ = ns.Close()
	return inNetns(netnsPath, func(h *netlink.Handle) error {
		l, err := h.LinkByName(IfbName(ifName))
		if err != nil || l.Type() != "ifb" {
			return nil
		}
		if err := h.LinkDel(l); err != nil {
			return fmt.Errorf("remove ifb %s of %s: %w", l.Attrs().Name, ifName, err)
		}
		return nil
	})
}
