// Package link is the device source that makes kernel network interfaces of
// the host network namespace, selected by name glob, into devices of one
// resource; the device ID is the interface name. It is meant for NICs
// without SR-IOV and for veth ends in tests. An interface backed by a PCI
// device is described with a pci device-info (its sysfs "device" link);
// other interfaces have none.
//
// # Moved is not deleted
//
// A CNI plugin such as host-device moves the allocated interface into the
// pod's network namespace. It then vanishes from the host namespace exactly
// like a deleted one, but it is in use and must stay listed and Healthy. The
// source tells the two apart with what the kernel reports, not with guesses:
//
//   - When an interface leaves a namespace, the kernel sends RTM_DELLINK to
//     the old namespace carrying IFLA_NEW_NETNSID (the id, in the old
//     namespace, of the namespace it went to; Linux >= 4.15, with
//     IFLA_NEW_IFINDEX since 5.x). A deletion's RTM_DELLINK has no such
//     attribute. The source subscribes to RTNLGRP_LINK and records every
//     selected interface whose RTM_DELLINK carries IFLA_NEW_NETNSID as
//     "moved": it stays listed and Healthy. host-device moves through a
//     temporary namespace first; that namespace's id is what is reported, so
//     the id is kept only for logs, never used to decide.
//
//   - A moved interface is gone when it comes back (RTM_NEWLINK with its name
//     in the host namespace: it is then listed from the host again), or when
//     it is a veth whose peer stayed in the host namespace and that peer is
//     deleted: a veth pair always dies whole, so the peer's RTM_DELLINK (or
//     its absence at a rescan) means the moved end died with its pod's
//     namespace.
//
//   - An interface that vanishes without IFLA_NEW_NETNSID was deleted: it
//     stays listed, Unhealthy (a pod may hold it: the kubelet must see it
//     fail, not vanish), until an interface of its name is back. The host
//     end of a moved veth is the exception: when it dies with its moved
//     peer, the pair was most likely destroyed with its pod's namespace, and
//     both ends leave the list.
//
//   - Moves that happened before the plugin started are found by
//     DiscoverMoved: host-device stores an interface's host name in its alias
//     (IFLA_IFALIAS) when it moves it into a pod, so an interface in another
//     namespace (named ones in /var/run/netns, and those of every process)
//     whose alias matches the globs is in use.
//
// Limits (documented in the README too): an interface moved before start by
// a CNI plugin that does not set the alias is not found until it returns; a
// moved interface found by DiscoverMoved has no device-info (its sysfs entry
// lives in the pod's namespace); a non-veth interface (or a veth with both
// ends moved) whose pod namespace is destroyed returns to the initial
// namespace under its pod name, no longer matches the glob, and stays listed
// as in use until the plugin restarts. A netlink overflow (ENOBUFS) loses
// events: the source rescans, which keeps the moves it already knew.
//
// Health: a deleted interface (above) is Unhealthy, and so is a listed host
// interface whose sysfs device link points to a device that no longer
// exists. A deletion is known from its RTM_DELLINK: one whose event was lost
// (ENOBUFS) leaves the list instead.
package link
