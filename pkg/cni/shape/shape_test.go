package shape

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/devplumb/devplumb/pkg/base/netshare"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// share is a pod's netns holding net1, a macvlan of the host's link parent.
func share(t *testing.T, parent netlink.Link) ns.NetNS {
	t.Helper()
	pod := testenv.NetNS(t)
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.ParentIndex = testenv.UniqueName("mv"), parent.Attrs().Index
	mv := &netlink.Macvlan{LinkAttrs: attrs, Mode: netlink.MACVLAN_MODE_BRIDGE}
	must(t, netlink.LinkAdd(mv))
	must(t, netlink.LinkSetNsFd(mv, int(pod.Fd())))
	must(t, pod.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(attrs.Name)
		if err == nil {
			err = netlink.LinkSetName(l, "net1")
		}
		return err
	}))
	return pod
}

// parentLink is a veth end on the host (this kernel has no dummy links),
// removed when the test ends.
func parentLink(t *testing.T) netlink.Link {
	t.Helper()
	l, err := netlink.LinkByName(testenv.VethPair(t, "shp") + "a")
	must(t, err)
	return l
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Two shares of one parent, each in its pod's netns at its own rate: what
// each pod sends meets a tbf at its rate on its macvlan, what it receives
// is redirected to its own ifb with a tbf at the same rate; the queue
// holds 25 ms of the rate and the burst.
func TestApplyTwoSharesOfOneParent(t *testing.T) {
	parent := parentLink(t)
	rates := []uint64{300 * netshare.Mbit, 600 * netshare.Mbit}
	var pods []ns.NetNS
	for _, r := range rates {
		pod := share(t, parent)
		must(t, Apply(pod.Path(), "net1", Spec{Share: "claim a/b share s", Rate: r}))
		pods = append(pods, pod)
	}
	for i, pod := range pods {
		got, err := Read(pod.Path(), "net1")
		must(t, err)
		if got.Send != rates[i] || got.Receive != rates[i] || got.Ifb != IfbName("net1") {
			t.Errorf("pod %d shaped %+v, want %d bit/s both ways through %s", i, got, rates[i], IfbName("net1"))
		}
		bytes := rates[i] / 8
		if want := uint32(bytes/40 + bytes/100); got.Limit != want { // 25 ms + a 10 ms burst
			t.Errorf("pod %d: tbf limit %d bytes, want %d", i, got.Limit, want)
		}
	}
}

// An ADD of an interface the pod had before (ADD, DEL, ADD in one netns)
// finds the ifb the first one left and replaces it.
func TestApplyReplacesALeftIfb(t *testing.T) {
	pod := share(t, parentLink(t))
	must(t, Apply(pod.Path(), "net1", Spec{Share: "s", Rate: 100 * netshare.Mbit}))
	must(t, pod.Do(func(ns.NetNS) error { // what a DEL leaves: the ifb, not the macvlan's qdiscs
		l, err := netlink.LinkByName("net1")
		if err == nil {
			err = netlink.QdiscDel(&netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: ingressHandle, Parent: netlink.HANDLE_INGRESS}})
		}
		if err == nil {
			err = netlink.QdiscDel(&netlink.Tbf{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: rootHandle, Parent: netlink.HANDLE_ROOT}})
		}
		return err
	}))
	must(t, Apply(pod.Path(), "net1", Spec{Share: "s", Rate: 200 * netshare.Mbit}))
	got, err := Read(pod.Path(), "net1")
	must(t, err)
	if got.Send != 200*netshare.Mbit || got.Receive != 200*netshare.Mbit {
		t.Errorf("shaped %+v after the second ADD, want 200M both ways", got)
	}
}

// A failure halfway (the ingress qdisc is taken: another link by the ifb's
// name, an ingress qdisc already there, no interface) is an error naming
// the share, its rate and the interface, and leaves nothing of Apply's.
func TestApplyFailureLeavesNothing(t *testing.T) {
	for name, spoil := range map[string]func(l netlink.Link) error{
		"foreign link": func(netlink.Link) error {
			return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: IfbName("net1")}, PeerName: "peer0"})
		},
		"ingress taken": func(l netlink.Link) error {
			return netlink.QdiscAdd(&netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index,
				Handle: ingressHandle, Parent: netlink.HANDLE_INGRESS}})
		},
		"no interface": netlink.LinkDel,
	} {
		t.Run(name, func(t *testing.T) {
			pod := share(t, parentLink(t))
			must(t, pod.Do(func(ns.NetNS) error {
				l, err := netlink.LinkByName("net1")
				if err == nil {
					err = spoil(l)
				}
				return err
			}))
			err := Apply(pod.Path(), "net1", Spec{Share: "claim ns/c share 5c0f", Rate: 300 * netshare.Mbit})
			if err == nil || !strings.Contains(err.Error(), "claim ns/c share 5c0f: bandwidth 300000000 bit/s cannot be enforced on net1") {
				t.Fatalf("Apply: %v, want an error naming the share, its rate and the interface", err)
			}
			leftOf(t, pod, name == "foreign link")
		})
	}
}

// leftOf fails the test when the pod's netns holds an ifb, or a tbf on net1;
// foreign: the test's own veth by the ifb's name must still be there.
func leftOf(t *testing.T, pod ns.NetNS, foreign bool) {
	t.Helper()
	must(t, pod.Do(func(ns.NetNS) error {
		links, err := netlink.LinkList()
		kept := false
		for _, l := range links {
			kept = kept || l.Attrs().Name == IfbName("net1") && l.Type() == "veth"
			if l.Type() == "ifb" {
				t.Errorf("ifb %s left", l.Attrs().Name)
			}
			qdiscs, _ := netlink.QdiscList(l)
			for _, q := range qdiscs {
				if q.Type() == "tbf" {
					t.Errorf("tbf left on %s", l.Attrs().Name)
				}
			}
		}
		if kept != foreign {
			t.Errorf("the test's own veth named %s kept: %v, want %v", IfbName("net1"), kept, foreign)
		}
		return err
	}))
}

// Rates tbf cannot hold are refused before anything runs, naming the share
// and the rate; netshare's range is inside what it holds.
func TestCheckTheKernelsLimits(t *testing.T) {
	for _, ok := range []uint64{netshare.Mbit, 40_000 * netshare.Mbit, netshare.MaxRate} {
		if err := Check(Spec{Share: "s", Rate: ok}); err != nil {
			t.Errorf("rate %d: %v", ok, err)
		}
		if p, _ := params(ok); p.burst < minBurst || uint64(p.limit) < p.burst || p.buffer == 0 {
			t.Errorf("rate %d: %+v", ok, p)
		}
	}
	for rate, why := range map[uint64]string{
		0:                         "at least 8 bit/s",
		7:                         "at least 8 bit/s",
		100_000:                   "longer than tbf keeps",
		2_000_000 * netshare.Mbit: "32-bit limit",
		math.MaxUint64:            "32-bit limit",
	} {
		err := Check(Spec{Share: "claim ns/c share 5c0f", Rate: rate})
		if err == nil || !strings.Contains(err.Error(), "claim ns/c share 5c0f: bandwidth ") || !strings.Contains(err.Error(), why) {
			t.Errorf("rate %d: %v, want an error naming the share and %q", rate, err, why)
		}
	}
}

// An interface nobody shaped reads as not shaped.
func TestReadUnshaped(t *testing.T) {
	pod := share(t, parentLink(t))
	if _, err := Read(pod.Path(), "net1"); !errors.Is(err, errNotShaped) {
		t.Errorf("Read of a bare macvlan: %v", err)
	}
}

// Remove takes the ifb away (a DEL of an interface whose netns lives on),
// leaves a link of that name that is not an ifb, and is no error when the
// netns or the ifb is gone.
func TestRemove(t *testing.T) {
	pod := share(t, parentLink(t))
	must(t, Apply(pod.Path(), "net1", Spec{Share: "s", Rate: 100 * netshare.Mbit}))
	must(t, Remove(pod.Path(), "net1"))
	if testenv.HasLink(t, pod, IfbName("net1")) {
		t.Error("Remove left the ifb")
	}
	must(t, Remove(pod.Path(), "net1"))
	must(t, Remove("", "net1"))
	must(t, Remove("/proc/self/ns/no-such-netns", "net1"))
	must(t, pod.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: IfbName("net2")}, PeerName: "peer0"})
	}))
	must(t, Remove(pod.Path(), "net2"))
	if !testenv.HasLink(t, pod, IfbName("net2")) {
		t.Error("Remove took a veth by the ifb's name")
	}
}
