// Package vm boots a Debian kernel under QEMU with real PCI devices (two igb PFs with
// SR-IOV, one per NUMA node, behind an Intel IOMMU) and runs the tests of e2e/vm/guest
// inside it: every guest test is replayed here as a subtest of TestVM with its output.
//
// The host side: QEMU >= 8.0 (scripts/setup-qemu.sh installs it), the pinned kernel
// package (scripts/fetch-vm-kernel.sh), an initramfs of busybox, the kernel modules the
// scenarios need, the project's binaries (static), the CNI plugins and cnitool, and the
// guest test binary built with -race (with the dynamic loader and libc beside it). The
// guest runs its tests once and powers off; a guest that hangs or panics fails TestVM
// with its console log once vmBound has passed.
package vm
