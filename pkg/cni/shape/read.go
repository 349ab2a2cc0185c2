package shape

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// errNotShaped says Read found an interface without devplumb's shaping.
var errNotShaped = errors.New("not shaped")

// Shaped is what Read finds on an interface, in bit/s each way.
type Shaped struct {
	Send    uint64 // the tbf at the interface's root: what the pod sends
	Receive uint64 // the tbf of the ifb its ingress is redirected to: what it receives
	Ifb     string
	Limit   uint32 // the send tbf's queue in bytes
}

// Read reads back the shaping of ifName in the netns at netnsPath: the
// tests' proof, and what CHECK could compare. An interface without all of
// it (tbf, ingress redirected to an ifb with a tbf) is an error saying
// what is missing.
func Read(netnsPath, ifName string) (*Shaped, error) {
	var s *Shaped
	err := inNetns(netnsPath, func(h *netlink.Handle) error {
		var err error
		s, err = read(h, ifName)
		return err
	})
	return s, err
}

func read(h *netlink.Handle, ifName string) (*Shaped, error) {
	link, err := h.LinkByName(ifName)
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", ifName, err)
	}
	send, err := rootTbf(h, link)
	if err != nil {
		return nil, err
	}
	ifb, err := redirectTarget(h, link)
	if err != nil {
		return nil, err
	}
	recv, err := rootTbf(h, ifb)
	if err != nil {
		return nil, err
	}
	return &Shaped{Send: send.Rate * 8, Receive: recv.Rate * 8, Ifb: ifb.Attrs().Name, Limit: send.Limit}, nil
}

// rootTbf is link's root qdisc, which must be a tbf.
func rootTbf(h *netlink.Handle, link netlink.Link) (*netlink.Tbf, error) {
	qdiscs, err := h.QdiscList(link)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("qdiscs of %s: %w", link.Attrs().Name, err)
	}
	for _, q := range qdiscs {
		if q.Attrs().Parent == netlink.HANDLE_ROOT {
			if t, ok := q.(*netlink.Tbf); ok {
				return t, nil
			}
			return nil, fmt.Errorf("%s: root qdisc %s, no tbf: %w", link.Attrs().Name, q.Type(), errNotShaped)
		}
	}
	return nil, fmt.Errorf("%s: no root qdisc: %w", link.Attrs().Name, errNotShaped)
}

// redirectTarget is the ifb link's ingress filters redirect to.
func redirectTarget(h *netlink.Handle, link netlink.Link) (netlink.Link, error) {
	filters, err := h.FilterList(link, ingressHandle)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("%s: ingress filters: %w", link.Attrs().Name, err)
	}
	for _, f := range filters {
		u, ok := f.(*netlink.U32)
		if !ok {
			continue
		}
		for _, a := range u.Actions {
			if m, ok := a.(*netlink.MirredAction); ok && m.MirredAction == netlink.TCA_EGRESS_REDIR {
				ifb, err := h.LinkByIndex(m.Ifindex)
				if err != nil || ifb.Type() != "ifb" {
					return nil, fmt.Errorf("%s: ingress redirected to link %d, no ifb (%v): %w", link.Attrs().Name, m.Ifindex, err, errNotShaped)
				}
				return ifb, nil
			}
		}
	}
	return nil, fmt.Errorf("%s: no ingress redirect to an ifb: %w", link.Attrs().Name, errNotShaped)
}
