package sysfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// softRDMA names the RDMA devices that sit on one of netdevs without being
// children of a PCI function: soft-RoCE (rdma_rxe) links, whose port's GID
// table names the netdev they were added on
// (class/infiniband/<dev>/ports/<n>/gid_attrs/ndevs/0).
func softRDMA(root string, netdevs []string) []string {
	if len(netdevs) == 0 {
		return nil
	}
	var out []string
	for _, ibdev := range dirNames(filepath.Join(root, "class", "infiniband")) {
		ndevs, _ := filepath.Glob(filepath.Join(root, "class", "infiniband", ibdev, "ports", "*", "gid_attrs", "ndevs", "0"))
		for _, f := range ndevs {
			if b, err := os.ReadFile(f); err == nil && slices.Contains(netdevs, strings.TrimSpace(string(b))) {
				out = append(out, ibdev)
				break
			}
		}
	}
	return out
}

// rdmaCharClasses are the sysfs classes of an RDMA device's user-space
// char devices and the prefixes of their names, in the order they are
// handed out: connection manager, subnet manager, MAD, verbs.
var rdmaCharClasses = []struct{ class, prefix string }{
	{"infiniband_cm", "ucm"},
	{"infiniband_mad", "issm"},
	{"infiniband_mad", "umad"},
	{"infiniband_verbs", "uverbs"},
}

// RDMACharDevices are the /dev/infiniband nodes a container needs to use
// RDMA device ibdev: each class device whose ibdev file names it
// (uverbsN, umadN, issmN, ucmN), and the shared rdma_cm when the rdma_ucm
// module has made it (class/misc/rdma_cm).
func RDMACharDevices(root, ibdev string) []string {
	var out []string
	for _, c := range rdmaCharClasses {
		dir := filepath.Join(root, "class", c.class)
		for _, n := range dirNames(dir) {
			if strings.HasPrefix(n, c.prefix) && readTrim(filepath.Join(dir, n), "ibdev") == ibdev {
				out = append(out, "/dev/infiniband/"+n)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "class", "misc", "rdma_cm")); err == nil {
		out = append(out, "/dev/infiniband/rdma_cm")
	}
	return out
}
