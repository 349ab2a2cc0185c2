package vm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A guest whose kernel panics (here: no init in the initramfs) powers off at once and
// is a failure with the panic in its console log, not a hang.
func TestGuestPanicIsAFailure(t *testing.T) {
	requireQEMU(t)
	kernelTree := fetchKernel(t)
	kernels, _ := filepath.Glob(filepath.Join(kernelTree, "boot", "vmlinuz-*"))
	dir := t.TempDir()
	s := stage{dir: filepath.Join(dir, "tree")}
	initrd := filepath.Join(dir, "initrd.cpio")
	must(t, errors.Join(s.addProgram("/bin/busybox", "bin/busybox"), s.pack(initrd)))
	console := filepath.Join(dir, "console.log")
	start := time.Now()
	log, err := boot("tcg", machine(kernels[0], initrd, "", console, os.DevNull), console, 2*time.Minute)
	verdict := outcome(log, err)
	if verdict == nil || !strings.Contains(verdict.Error(), "panicked") || !strings.Contains(log, "Kernel panic") {
		t.Fatalf("verdict %v (boot: %v) after %s; console:\n%s", verdict, err, time.Since(start), log)
	}
	t.Logf("a panicking guest stopped after %s: %v", time.Since(start).Round(time.Second), verdict)
}
