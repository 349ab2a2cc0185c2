package devnodes

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// node is one device node that may be handed out.
type node struct {
	Path string
	NUMA int // -1 when the kernel does not know
}

// available lists the nodes matching the glob, in natural order, without
// the reserved ones. Only character and block devices count.
func available(a *Args) ([]node, error) {
	paths, err := filepath.Glob(a.Glob)
	if err != nil {
		return nil, fmt.Errorf("glob %q: %w", a.Glob, err)
	}
	var out []node
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			continue // gone since the glob
		}
		kind := ""
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			kind = "char"
		case unix.S_IFBLK:
			kind = "block"
		default:
			continue
		}
		out = append(out, node{Path: p, NUMA: numaNode(a.SysfsRoot, kind, st.Rdev)})
	}
	slices.SortFunc(out, func(x, y node) int { return naturalCompare(x.Path, y.Path) })
	if a.NumSystemReserved >= len(out) {
		return nil, nil
	}
	return out[a.NumSystemReserved:], nil
}

// numaNode reads the NUMA node of the device behind a device number from
// sysfs (/sys/dev/<kind>/<major>:<minor>/device/numa_node); -1 when the
// kernel does not know it (no such file, or -1 in it).
func numaNode(sysfs, kind string, rdev uint64) int {
	p := filepath.Join(sysfs, "dev", kind, fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev)), "device", "numa_node")
	data, err := os.ReadFile(p)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// naturalCompare orders strings with their digit runs compared as numbers:
// /dev/tty2 < /dev/tty10.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			if c := da - db; c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digitRun(s string) int {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}
