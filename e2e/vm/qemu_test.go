package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// guestInit is the guest's /init: the file systems, the modules, the guest tests with
// their test2json stream on the second serial port (raw: no CR added), a last line on
// the console saying how they exited, and power off. With devplumb.probe on the kernel
// command line it only says it booted (the KVM probe).
const guestInit = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/devplumb/bin HOME=/root TMPDIR=/tmp
mkdir -p /proc /sys /dev /tmp /run /root /var
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
ln -s /run /var/run
echo "devplumb-vm: booted kernel $(uname -r), $(nproc) CPUs"
if grep -qw devplumb.probe /proc/cmdline; then echo "devplumb-vm: probe ok"; poweroff -f; fi
while read -r m; do insmod "/lib/modules/$m.ko" || echo "devplumb-vm: insmod $m failed"; done </lib/modules/order
ip link set lo up
run=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^devplumb.run=//p')
stty -F /dev/ttyS1 raw -echo
echo "devplumb-vm: running the guest tests"
DEVPLUMB_VM_BIN=/devplumb/bin /devplumb/guest.test -test.v=test2json -test.count=1 \
	-test.timeout=GUEST_TIMEOUT -test.run="${run:-.}" >/dev/ttyS1 2>&1
echo "devplumb-vm: guest tests exited $?"
sync
poweroff -f
`

// exitMarker starts the console line the guest prints once its tests have run.
const exitMarker = "devplumb-vm: guest tests exited "

// outcome is the verdict on a guest run from boot's error and the console log: the
// guest must have powered off after its tests passed. A kernel panic (the guest powers
// off: panic=-1, -no-reboot) or a hang (boot's error) is a failure.
func outcome(log string, bootErr error) error {
	switch {
	case bootErr != nil:
		return bootErr
	case strings.Contains(log, "Kernel panic"):
		return errors.New("the guest's kernel panicked")
	case !strings.Contains(log, exitMarker):
		return errors.New("the guest powered off before its tests ended")
	case !strings.Contains(log, exitMarker+"0"):
		return errors.New("guest tests failed")
	}
	return nil
}

// machine is the QEMU command line of the guest, less the accelerator: a q35 machine
// with an Intel IOMMU, two NUMA nodes of 1 GiB each (the one CPU on node 0: with a
// second vCPU, TCG on a busy host has left that CPU without timer interrupts, an RCU
// stall that hung the guest at boot), and on each node a PCIe expander bus (pxb-pcie, whose numa_node the guest's ACPI tables carry) with a
// root port holding an igb PF (SR-IOV, 7 VFs at most); and a virtio NIC to reach the host.
func machine(kernel, initrd, appendArgs, console, results string) []string {
	args := []string{
		"-machine", "q35,kernel-irqchip=split", "-cpu", "max", "-smp", "1", "-m", "2G",
		"-object", "memory-backend-ram,id=m0,size=1G", "-object", "memory-backend-ram,id=m1,size=1G",
		"-numa", "node,nodeid=0,cpus=0,memdev=m0", "-numa", "node,nodeid=1,memdev=m1",
		"-device", "intel-iommu,intremap=on",
	}
	for n := range 2 {
		args = append(args,
			"-device", fmt.Sprintf("pxb-pcie,id=pxb%d,bus_nr=%d,numa_node=%d,bus=pcie.0", n, 0x20*(n+1), n),
			"-device", fmt.Sprintf("pcie-root-port,id=rp%d,bus=pxb%d,chassis=%d", n, n, n+1),
			"-netdev", fmt.Sprintf("user,id=net%d,restrict=on", n),
			"-device", fmt.Sprintf("igb,bus=rp%d,netdev=net%d", n, n))
	}
	// The guest's way to the host's kube-apiserver (guestHost): a virtio NIC on a user
	// network of its own, not restricted (restrict=on would cut the host off too); the
	// PFs' user networks stay restricted.
	args = append(args, "-netdev", "user,id=api", "-device", "virtio-net-pci,netdev=api,bus=pcie.0")
	return append(args,
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 intel_iommu=on iommu=pt loglevel=4 "+appendArgs,
		"-nodefaults", "-display", "none", "-no-reboot",
		"-serial", "file:"+console, "-serial", "file:"+results)
}

// boot runs QEMU until the guest powers off or bound passes (then QEMU is killed). It
// returns the console log and whether the guest reached its exit line.
func boot(accel string, args []string, console string, bound time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", append([]string{"-accel", accel}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err := cmd.Run()
	log, _ := os.ReadFile(console)
	switch {
	case ctx.Err() != nil:
		return string(log), fmt.Errorf("the guest (%s) did not power off within %s: killed", accel, bound)
	case err != nil:
		return string(log), fmt.Errorf("qemu-system-x86_64 (%s): %v: %s", accel, err, stderr.String())
	}
	return string(log), nil
}

// kvmWorks boots the kernel under KVM with a busybox-only initramfs and says whether it
// got to userspace within a few seconds. /dev/kvm may exist where nested virtualisation
// hangs the guest at boot, so only a boot tells.
func kvmWorks(kernel, dir string) (bool, string) {
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err != nil {
		return false, fmt.Sprintf("no usable /dev/kvm (%v)", err)
	} else {
		f.Close()
	}
	s := stage{dir: filepath.Join(dir, "probe")}
	initrd := filepath.Join(dir, "probe.cpio")
	if err := errors.Join(s.addProgram("/bin/busybox", "bin/busybox"), s.writeInit(""), s.pack(initrd)); err != nil {
		return false, err.Error()
	}
	console := filepath.Join(dir, "probe-console.log")
	args := machine(kernel, initrd, "devplumb.probe", console, os.DevNull)
	log, err := boot("kvm", args, console, 20*time.Second)
	if err == nil && strings.Contains(log, "devplumb-vm: probe ok") {
		return true, "a KVM guest booted"
	}
	return false, fmt.Sprintf("a KVM guest did not boot within 20 s (%v)", err)
}

// writeInit writes /init with the guest tests' timeout.
func (s stage) writeInit(guestTimeout string) error {
	script := strings.ReplaceAll(guestInit, "GUEST_TIMEOUT", guestTimeout)
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return os.WriteFile(filepath.Join(s.dir, "init"), []byte(script), 0o755)
}
