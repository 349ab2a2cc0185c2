package vm

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// guestModules are the kernel modules the guest loads (with what they depend on): the
// igb PF and igbvf VF drivers, vfio-pci, soft-RoCE and its user verbs, veth, and virtio-net.
// rdma_rxe asks the crypto API for "crc32", which the kernel would load through
// modprobe (the guest has none; without it rdma link add fails with ENOENT):
// crc32_generic is loaded first. virtio_net (after igb: the PFs keep eth0 and eth1)
// is the NIC the guest reaches the host's kube-apiserver through.
var guestModules = []string{"igb", "igbvf", "vfio_pci", "vfio_iommu_type1", "crc32_generic", "rdma_rxe", "ib_uverbs", "rdma_ucm", "veth", "virtio_pci", "virtio_net"}

// stage is the initramfs tree being built.
type stage struct{ dir string }

// add copies the file src to path in the tree (its mode kept).
func (s stage) add(src, path string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	info, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	dst := filepath.Join(s.dir, path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := os.WriteFile(dst, data, info.Mode().Perm()); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return nil
}

// addProgram copies the executable src to path, with the shared libraries and the
// dynamic loader it needs (ldd's answer) at their own paths.
func (s stage) addProgram(src, path string) error {
	if err := s.add(src, path); err != nil {
		return err
	}
	out, err := exec.Command("ldd", src).Output()
	if err != nil {
		return nil // ldd exits 1 for a static executable: nothing more to copy
	}
	for _, lib := range lddPaths(out) {
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return fmt.Errorf("initramfs: %s needs %s: %w", src, lib, err)
		}
		if err := s.add(real, lib); err != nil {
			return err
		}
	}
	return nil
}

var lddPath = regexp.MustCompile(`(/\S+) \(0x`)

// lddPaths are the absolute library paths in ldd's output.
func lddPaths(out []byte) []string {
	var paths []string
	for _, m := range lddPath.FindAllSubmatch(out, -1) {
		paths = append(paths, string(m[1]))
	}
	return paths
}

// addModules copies the modules wanted and those they depend on (each module's
// .modinfo "depends=") to /lib/modules, and writes /lib/modules/order: one file name a
// line, every module after those it depends on, for the guest's insmod.
func (s stage) addModules(kernelTree string, wanted []string) error {
	files := map[string]string{} // module name (with _) -> path
	err := filepath.WalkDir(filepath.Join(kernelTree, "lib", "modules"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".ko") {
			files[modName(filepath.Base(p))] = p
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("initramfs: kernel modules: %w", err)
	}
	var order []string
	seen := map[string]bool{}
	var visit func(name string) error
	visit = func(name string) error {
		if seen[name] {
			return nil
		}
		seen[name] = true
		p, ok := files[name]
		if !ok {
			return nil // built into the kernel
		}
		deps, err := modDepends(p)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		order = append(order, name)
		return s.add(p, filepath.Join("lib", "modules", name+".ko"))
	}
	for _, m := range wanted {
		if _, ok := files[m]; !ok {
			return fmt.Errorf("initramfs: module %s is not in %s", m, kernelTree)
		}
		if err := visit(m); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(s.dir, "lib", "modules", "order"), []byte(strings.Join(order, "\n")+"\n"), 0o644)
}

func modName(file string) string {
	return strings.ReplaceAll(strings.TrimSuffix(file, ".ko"), "-", "_")
}

// modDepends is the "depends=" list of a module's .modinfo section.
func modDepends(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("initramfs: module %s: %w", path, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("initramfs: module %s has no .modinfo", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("initramfs: module %s: %w", path, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok && len(v) > 0 {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				deps = append(deps, modName(d))
			}
			return deps, nil
		}
	}
	return nil, nil
}

// pack writes the tree as a newc cpio archive (the kernel's initramfs format), with
// busybox's cpio.
func (s stage) pack(out string) error {
	var names bytes.Buffer
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == s.dir {
			return err
		}
		rel, _ := filepath.Rel(s.dir, p)
		names.WriteString(rel + "\n")
		return nil
	})
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	defer f.Close()
	cmd := exec.Command("busybox", "cpio", "-o", "-H", "newc")
	cmd.Dir, cmd.Stdin = s.dir, &names
	w := bufio.NewWriter(f)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("initramfs: busybox cpio: %v: %s", err, stderr.String())
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return f.Close()
}
