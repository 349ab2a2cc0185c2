package link

import (
	"context"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/source"
	"github.com/devplumb/devplumb/pkg/netdev/source/sysfs/sysfstest"
	"github.com/devplumb/devplumb/pkg/testenv"
)

func moveTo(t *testing.T, name string, target ns.NetNS) {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(l, int(target.Fd())); err != nil {
		t.Fatal(err)
	}
}

// watched starts the source's watch (subscribed before it returns) and returns
// a function waiting until a scan satisfies cond.
func watched(t *testing.T, p *Source) func(what string, cond func([]source.Device) bool) {
	t.Helper()
	s, err := subscribe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.watchOn(ctx, s, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	return func(what string, cond func([]source.Device) bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			devs, err := p.Scan()
			if err != nil {
				t.Fatal(err)
			}
			if cond(devs) {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("%s: not reached; devices %+v", what, devs)
			}
		}
	}
}

func has(devs []source.Device, id string) bool {
	for _, d := range devs {
		if d.ID == id && d.Healthy {
			return true
		}
	}
	return false
}

func TestMovedVethStaysUntilItsNamespaceDies(t *testing.T) {
	prefix := testenv.VethPair(t, "ndp")
	p, err := New(Config{Names: []string{prefix + "a"}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := watched(t, p)
	wait("listed", func(d []source.Device) bool { return has(d, prefix+"a") })
	// Like host-device: through a temporary namespace into the pod's.
	tmp, pod := testenv.NetNS(t), testenv.NetNS(t)
	moveTo(t, prefix+"a", tmp)
	if err := tmp.Do(func(ns.NetNS) error { moveTo(t, prefix+"a", pod); return nil }); err != nil {
		t.Fatal(err)
	}
	testenv.RemoveNetNS(t, tmp)
	wait("moved end recorded", func([]source.Device) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		_, ok := p.moved[prefix+"a"]
		return ok
	})
	if devs, _ := p.Scan(); !has(devs, prefix+"a") {
		t.Fatalf("moved interface not listed as healthy: %+v", devs)
	}
	// Destroying the pod namespace destroys the pair.
	testenv.RemoveNetNS(t, pod)
	wait("gone with its namespace", func(d []source.Device) bool { return len(d) == 0 })
}

func TestMovedBackIsListedFromHost(t *testing.T) {
	prefix := testenv.VethPair(t, "ndp")
	p, _ := New(Config{Names: []string{prefix + "*"}}, "", nil)
	wait := watched(t, p)
	wait("both listed", func(d []source.Device) bool { return len(d) == 2 })
	pod := testenv.NetNS(t)
	moveTo(t, prefix+"a", pod)
	wait("moved recorded", func([]source.Device) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.moved) == 1
	})
	if devs, _ := p.Scan(); len(devs) != 2 {
		t.Fatalf("moved end dropped: %+v", devs)
	}
	host, _ := ns.GetCurrentNS()
	defer host.Close()
	if err := pod.Do(func(ns.NetNS) error { moveTo(t, prefix+"a", host); return nil }); err != nil {
		t.Fatal(err)
	}
	wait("back in host", func(d []source.Device) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(d) == 2 && len(p.moved) == 0
	})
}

// TestDeletedTurnsUnhealthyUntilBack: a deleted interface stays listed,
// Unhealthy, and is Healthy again when an interface of its name is back.
func TestDeletedTurnsUnhealthyUntilBack(t *testing.T) {
	prefix := testenv.VethPair(t, "ndp")
	p, _ := New(Config{Names: []string{prefix + "a"}}, "", nil)
	wait := watched(t, p)
	wait("listed", func(d []source.Device) bool { return has(d, prefix+"a") })
	l, _ := netlink.LinkByName(prefix + "a")
	if err := netlink.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	wait("deleted: unhealthy", func(d []source.Device) bool {
		return len(d) == 1 && d[0].ID == prefix+"a" && !d[0].Healthy && d[0].Reason == "interface deleted"
	})
	p.mu.Lock()
	moved := len(p.moved)
	p.mu.Unlock()
	if moved != 0 {
		t.Fatalf("deleted interface recorded as moved: %+v", p.moved)
	}
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: prefix + "a"}, PeerName: prefix + "b"}); err != nil {
		t.Fatal(err)
	}
	wait("back: healthy", func(d []source.Device) bool { return len(d) == 1 && has(d, prefix+"a") })
}

func TestBadConfig(t *testing.T) {
	for _, c := range []Config{{}, {Names: []string{"["}}, {Names: []string{""}}} {
		if _, err := New(c, "", nil); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestPCIBackedInterfaceIsDescribed(t *testing.T) {
	prefix := testenv.VethPair(t, "ndp")
	root := t.TempDir()
	// Pretend the "a" end is a PCI NIC's interface.
	sysfstest.AddPCI(t, root, sysfstest.PCI{Addr: "0000:03:00.0", Vendor: "8086", Device: "1533", Class: "020000", Driver: "igb", NUMA: 1})
	sysfstest.AddNetDev(t, root, prefix+"a", "0000:03:00.0")
	p, _ := New(Config{Names: []string{prefix + "*"}}, root, nil)
	devs, err := p.Scan()
	if err != nil || len(devs) != 2 {
		t.Fatalf("%+v %v", devs, err)
	}
	a, b := devs[0], devs[1]
	if a.Info == nil || a.Info.Pci.PciAddress != "0000:03:00.0" || a.NUMANode != 1 || !a.Healthy {
		t.Errorf("PCI-backed interface %+v", a)
	}
	if b.Info != nil || b.NUMANode != deviceplugin.NoNUMA {
		t.Errorf("plain veth %+v", b)
	}
	// The interface outlives its device: Unhealthy.
	sysfstest.RemovePCI(t, root, "0000:03:00.0")
	devs, _ = p.Scan()
	if devs[0].Healthy {
		t.Errorf("interface without its device is healthy: %+v", devs[0])
	}
}

// TestMoveDuringScanIsKept: an interface moved into a pod while a scan is
// between listing links and using them is in use: the stale list must not
// count as "back in the host namespace", or the device would leave the
// kubelet's list while a pod holds it.
func TestMoveDuringScanIsKept(t *testing.T) {
	prefix := testenv.VethPair(t, "ndp")
	name := prefix + "a"
	p, err := New(Config{Names: []string{name}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	pod := testenv.NetNS(t)
	p.afterList = func() {
		p.afterList = nil
		moveTo(t, name, pod)
		p.linkGone(link, link.Attrs().Index, 0, true) // what the watcher does with the RTM_DELLINK
	}
	count := func(devs []source.Device) int {
		n := 0
		for _, d := range devs {
			if d.ID == name && d.Healthy {
				n++
			}
		}
		return n
	}
	for i, what := range []string{"scan racing the move", "next scan"} {
		devs, err := p.Scan()
		if err != nil {
			t.Fatal(err)
		}
		if n := count(devs); n != 1 {
			t.Fatalf("%s (%d): %s listed healthy %d times, want once: %+v", what, i, name, n, devs)
		}
	}
}
