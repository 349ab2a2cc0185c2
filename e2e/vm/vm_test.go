package vm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/devplumb/devplumb/pkg/testenv"
)

// vmBound is how long the guest may run, boot to power off: beyond it the guest is
// called hung, killed, and TestVM fails with its console log. Its tests take about 4
// minutes under TCG on a busy 2-core host; the bound leaves room for a busier one.
const vmBound = 12 * time.Minute

// guestCommands are the project's binaries the guest tests run, built static.
var guestCommands = []string{"./cmd/devplumb", "./cmd/devplumb-direct", "./cmd/devplumbctl", "./cmd/netdev-dp", "./cmd/nodesim"}

func TestVM(t *testing.T) {
	start := time.Now()
	requireQEMU(t)
	kernelTree := fetchKernel(t)
	kernels, _ := filepath.Glob(filepath.Join(kernelTree, "boot", "vmlinuz-*"))
	if len(kernels) != 1 {
		t.Fatalf("no single boot/vmlinuz-* in %s: %v", kernelTree, kernels)
	}
	dir := t.TempDir()
	accel, why := "tcg", ""
	if ok, reason := kvmWorks(kernels[0], dir); ok {
		accel, why = "kvm", reason
	} else {
		why = reason
	}
	t.Logf("accelerator: %s: %s", accel, why)

	run := os.Getenv("DEVPLUMB_VM_RUN")
	api := startAPIServer(t, dir, run) // while the initramfs builds
	s := stageInitramfs(t, kernelTree, dir)
	if kubeconfig, err := api.guestKubeconfig(); err != nil {
		t.Errorf("no kube-apiserver for the guest's DRA tests (they are skipped): %v", err)
	} else if kubeconfig != "" {
		must(t, s.write(guestKubeconfig, kubeconfig))
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	must(t, s.pack(initrd))
	t.Logf("initramfs built in %s (since start)", time.Since(start).Round(time.Second))
	console, results := filepath.Join(dir, "console.log"), filepath.Join(dir, "results")
	appendArgs := ""
	if run != "" {
		appendArgs = "devplumb.run=" + run // a regexp without spaces, for -test.run
	}
	booted := time.Now()
	log, err := boot(accel, machine(kernels[0], initrd, appendArgs, console, results), console, vmBound)
	t.Logf("guest ran %s (%s); TestVM so far %s", time.Since(booted).Round(time.Second), accel, time.Since(start).Round(time.Second))
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "devplumb-vm: ") {
			t.Log("console: " + strings.TrimSpace(l))
		}
	}
	tests, rest, perr := parseResults(results)
	replay(t, tests)
	if err := errors.Join(outcome(log, err), perr); err != nil {
		t.Errorf("guest: %v\noutput outside tests:\n%s\nconsole:\n%s", err, rest, log)
	}
	if len(tests) == 0 {
		t.Errorf("the guest ran no test\nconsole:\n%s", log)
	}
}

// requireQEMU skips when QEMU >= 8.0 is missing and this is not root (scripts/setup-qemu.sh,
// which make test runs, installs it as root); as root its absence is a failure.
func requireQEMU(t *testing.T) {
	out, err := exec.Command("qemu-system-x86_64", "--version").Output()
	var major int
	if err == nil {
		fmt.Sscanf(strings.TrimPrefix(string(out), "QEMU emulator version "), "%d", &major)
	}
	if major >= 8 {
		return
	}
	msg := fmt.Sprintf("QEMU >= 8.0 is missing (qemu-system-x86_64 --version: %q, %v): scripts/setup-qemu.sh installs it", out, err)
	if os.Getuid() != 0 {
		t.Skip(msg + " as root")
	}
	t.Fatal(msg)
}

// fetchKernel is the unpacked kernel package's directory (scripts/fetch-vm-kernel.sh).
func fetchKernel(t *testing.T) string {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("no apt-get: scripts/fetch-vm-kernel.sh fetches Debian's kernel package with it")
	}
	cmd := exec.Command(filepath.Join(testenv.ModuleRoot(), "scripts", "fetch-vm-kernel.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/fetch-vm-kernel.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// stageInitramfs builds the guest's binaries and stages them with busybox and the
// modules; the caller packs the tree.
func stageInitramfs(t *testing.T, kernelTree, dir string) stage {
	bin := filepath.Join(dir, "build")
	goBuild(t, append([]string{"build", "-trimpath", "-o", bin + "/"}, guestCommands...), "CGO_ENABLED=0")
	goBuild(t, []string{"test", "-c", "-race", "-tags", "vmguest", "-o", filepath.Join(bin, "guest.test"), "./e2e/vm/guest"})
	cni := testenv.CNIPlugins(t)
	s := stage{dir: filepath.Join(dir, "initramfs")}
	must(t, s.writeInit((vmBound - time.Minute).String()))
	must(t, s.addProgram("/bin/busybox", "bin/busybox"))
	must(t, s.addModules(kernelTree, guestModules))
	must(t, s.addProgram(filepath.Join(bin, "guest.test"), "devplumb/guest.test"))
	for _, c := range guestCommands {
		name := filepath.Base(c)
		must(t, s.addProgram(filepath.Join(bin, name), "devplumb/bin/"+name))
	}
	for _, p := range testenv.CNIPluginPackages {
		name := filepath.Base(p)
		must(t, s.addProgram(filepath.Join(cni, name), "devplumb/bin/"+name))
	}
	// iproute2's rdma (with its libraries) adds the soft-RoCE links.
	if rdma, err := exec.LookPath("rdma"); err == nil {
		must(t, s.addProgram(rdma, "devplumb/bin/rdma"))
	} else {
		t.Log("no rdma (iproute2) on the host: the guest's RDMA test fails without it")
	}
	return s
}

func goBuild(t *testing.T, args []string, env ...string) {
	cmd := exec.Command("go", args...)
	cmd.Dir = testenv.ModuleRoot()
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
