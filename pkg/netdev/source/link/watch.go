package link

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Watch follows RTNLGRP_LINK and calls changed whenever a selected interface
// appears, changes, is moved or deleted, or a moved veth's peer dies.
func (s *Source) Watch(ctx context.Context, changed func()) error {
	sock, err := subscribe()
	if err != nil {
		return err
	}
	defer sock.Close()
	return s.watchOn(ctx, sock, changed)
}

// rcvbuf is the link-event socket's receive buffer, in bytes.
const rcvbuf = 4 << 20

func subscribe() (*nl.NetlinkSocket, error) {
	s, err := nl.Subscribe(unix.NETLINK_ROUTE, unix.RTNLGRP_LINK)
	if err != nil {
		return nil, fmt.Errorf("netdevs source: subscribe to link events: %w", err)
	}
	// A busy node (pods starting, veths made and moved by the hundred)
	// overflows the default buffer and loses events (ENOBUFS): a lost
	// RTM_DELLINK makes a deleted interface leave the list instead of
	// staying Unhealthy. Root may force a larger one, as ip monitor does.
	if err := s.SetReceiveBufferSize(rcvbuf, true); err != nil {
		if err := s.SetReceiveBufferSize(rcvbuf, false); err != nil {
			s.Close()
			return nil, fmt.Errorf("netdevs source: netlink receive buffer: %w", err)
		}
	}
	// Receive blocks; a timeout lets the loop notice that ctx ended.
	if err := s.SetReceiveTimeout(&unix.Timeval{Usec: 200000}); err != nil {
		s.Close()
		return nil, fmt.Errorf("netdevs source: netlink timeout: %w", err)
	}
	return s, nil
}

func (s *Source) watchOn(ctx context.Context, sock *nl.NetlinkSocket, changed func()) error {
	for ctx.Err() == nil {
		msgs, _, err := sock.Receive()
		switch {
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			s.log.Warn("netlink events lost; rescanning")
			changed()
			continue
		case err != nil:
			return fmt.Errorf("netdevs source: receive link events: %w", err)
		}
		relevant := false
		for _, m := range msgs {
			relevant = s.handle(m) || relevant
		}
		if relevant {
			changed()
		}
	}
	return nil
}

// handle applies one link message and reports whether it concerns the source.
func (s *Source) handle(m syscall.NetlinkMessage) bool {
	if m.Header.Type != unix.RTM_NEWLINK && m.Header.Type != unix.RTM_DELLINK {
		return false
	}
	hdr := unix.NlMsghdr(m.Header)
	link, err := netlink.LinkDeserialize(&hdr, m.Data)
	if err != nil {
		s.log.Warn("undecodable link message", "err", err)
		return true // rescan to be safe
	}
	if m.Header.Type == unix.RTM_NEWLINK {
		// A listed interface renamed away changes the source too.
		return s.matches(link.Attrs().Name) || s.listedIndex(link.Attrs().Index)
	}
	movedTo, wasMoved := newNetNSID(m.Data)
	return s.linkGone(link, link.Attrs().Index, movedTo, wasMoved)
}

// newNetNSID returns IFLA_NEW_NETNSID of an RTM_DELLINK: present only when
// the interface moved to another namespace.
func newNetNSID(data []byte) (int, bool) {
	if len(data) < unix.SizeofIfInfomsg {
		return 0, false
	}
	attrs, err := nl.ParseRouteAttr(data[unix.SizeofIfInfomsg:])
	if err != nil {
		return 0, false
	}
	for _, a := range attrs {
		if a.Attr.Type == unix.IFLA_NEW_NETNSID && len(a.Value) >= 4 {
			return int(int32(binary.NativeEndian.Uint32(a.Value))), true
		}
	}
	return 0, false
}
