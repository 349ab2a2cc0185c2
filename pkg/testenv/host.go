package testenv

// What tests make on the host's network and file system, made one way: veth
// pairs and network namespaces that go away when the test ends, and the one
// recursive listing tests compare directories by.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
)

// UniqueName is prefix and 8 random hex digits: a link name no other test (or
// leftover of a killed run) uses. Keep prefix to 6 bytes: link names end at 15.
func UniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// VethPair makes a veth pair in the host namespace, both ends up, named
// stem+"a" and stem+"b" with stem = UniqueName(prefix), and returns stem.
// At cleanup both ends are deleted if they are still in the host namespace
// (one moved into a netns dies with it).
func VethPair(t testing.TB, prefix string) (stem string) {
	t.Helper()
	stem = UniqueName(prefix)
	ends := []string{stem + "a", stem + "b"}
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ends[0]}, PeerName: ends[1]}); err != nil {
		t.Fatalf("create veth pair %s: %v", stem, err)
	}
	t.Cleanup(func() {
		for _, n := range ends {
			if l, err := netlink.LinkByName(n); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
	})
	for _, n := range ends {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			t.Fatalf("set veth %s up: %v", n, err)
		}
	}
	return stem
}

// NetNS makes a network namespace that is closed and unmounted when the test
// ends (if RemoveNetNS has not done so before).
func NetNS(t testing.TB) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		_ = testutils.UnmountNS(n) // fails harmlessly after RemoveNetNS
	})
	return n
}

// RemoveNetNS closes and unmounts n before the test ends, as a runtime removes
// a sandbox's netns: what was moved into it dies with it.
func RemoveNetNS(t testing.TB, n ns.NetNS) {
	t.Helper()
	_ = n.Close()
	if err := testutils.UnmountNS(n); err != nil {
		t.Fatalf("remove netns %s: %v", n.Path(), err)
	}
}

// Files lists the files below dir, recursively, as names relative to dir in
// lexical order; none when dir does not exist. A file that goes while it is
// listed is left out; any other error fails the test.
func Files(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	return out
}

// HasLink reports whether a link named name is in n, or in the host's
// namespace when n is nil: where a delegate moved a device, or left it.
func HasLink(t testing.TB, n ns.NetNS, name string) bool {
	t.Helper()
	if n == nil {
		_, err := netlink.LinkByName(name)
		return err == nil
	}
	found := false
	if err := n.Do(func(ns.NetNS) error {
		_, err := netlink.LinkByName(name)
		found = err == nil
		return nil
	}); err != nil {
		t.Fatalf("look for link %s in netns %s: %v", name, n.Path(), err)
	}
	return found
}

// FreeAddr is a loopback address nobody listened on a moment ago, for a
// server under test to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// GetUnix GETs path from an HTTP server on a unix socket, waiting up to
// 10 s for it to answer; it returns the status and the body.
func GetUnix(t testing.TB, socket, path string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get("http://unix" + path)
		if err == nil {
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("GET %s on %s: %v", path, socket, err)
			}
			return resp.StatusCode, string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s on %s: %v", path, socket, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
