package socket

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

func healthy(devs []source.Device) int {
	n := 0
	for _, d := range devs {
		if d.Healthy {
			n++
		}
	}
	return n
}

func listen(t *testing.T, path string) net.Listener {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestVhostUserClientSocketsAreDevices(t *testing.T) {
	dir := t.TempDir()
	listen(t, filepath.Join(dir, "vhu0.sock"))
	listen(t, filepath.Join(dir, "vhu1.sock"))
	os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644)
	p, err := NewVhostUser(VhostUser{SocketDir: dir, Mode: "client"})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := p.Scan()
	if err != nil || len(devs) != 2 || devs[0].ID != "vhu0.sock" {
		t.Fatalf("%+v %v", devs, err)
	}
	d := devs[0]
	path := filepath.Join(dir, "vhu0.sock")
	if d.Info.VhostUser.Mode != "client" || d.Info.VhostUser.Path != path || devinfo.Validate(d.Info) != nil {
		t.Errorf("info %+v", d.Info.VhostUser)
	}
	if len(d.Mounts) != 1 || d.Mounts[0].HostPath != path || d.Mounts[0].ContainerPath != path {
		t.Errorf("mounts %+v", d.Mounts)
	}
}

func TestMountSocketDir(t *testing.T) {
	dir := t.TempDir()
	listen(t, filepath.Join(dir, "m0.sock"))
	p, err := NewMemif(Memif{SocketDir: dir, Role: "slave", Mode: "ip", MountSocketDir: true})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := p.Scan()
	if err != nil || len(devs) != 1 {
		t.Fatalf("%+v %v", devs, err)
	}
	if m := devs[0].Mounts; len(m) != 1 || m[0].HostPath != dir || m[0].ContainerPath != dir {
		t.Errorf("mounts %+v", m)
	}
	if i := devs[0].Info.Memif; i.Path != filepath.Join(dir, "m0.sock") || i.Mode != "ip" || i.Role != "slave" {
		t.Errorf("info %+v", i)
	}
}

func TestMemifMasterSubdirsAreDevices(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "m0"), 0o755)
	listen(t, filepath.Join(dir, "stray.sock"))
	p, err := NewMemif(Memif{SocketDir: dir, Role: "master"})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := p.Scan()
	if err != nil || len(devs) != 1 || devs[0].ID != "m0" {
		t.Fatalf("%+v %v", devs, err)
	}
	m := devs[0].Info.Memif
	if m.Role != "master" || m.Mode != "ethernet" || m.Path != filepath.Join(dir, "m0", "socket") || devinfo.Validate(devs[0].Info) != nil {
		t.Errorf("info %+v", m)
	}
	if devs[0].Mounts[0].HostPath != filepath.Join(dir, "m0") || devs[0].Mounts[0].ReadOnly {
		t.Errorf("mounts %+v", devs[0].Mounts)
	}
}

func TestBadConfig(t *testing.T) {
	dir := t.TempDir()
	for name, f := range map[string]func() error{
		"vhost mode":   func() error { _, err := NewVhostUser(VhostUser{SocketDir: dir, Mode: "both"}); return err },
		"relative dir": func() error { _, err := NewVhostUser(VhostUser{SocketDir: "run", Mode: "client"}); return err },
		"missing dir":  func() error { _, err := NewVhostUser(VhostUser{SocketDir: dir + "/nope", Mode: "client"}); return err },
		"memif role":   func() error { _, err := NewMemif(Memif{SocketDir: dir, Role: "primary"}); return err },
		"memif mode":   func() error { _, err := NewMemif(Memif{SocketDir: dir, Role: "slave", Mode: "punt"}); return err },
		"socket name":  func() error { _, err := NewMemif(Memif{SocketDir: dir, Role: "master", SocketName: "a/b"}); return err },
	} {
		if f() == nil {
			t.Errorf("%s: bad config accepted", name)
		}
	}
}

func TestWatchSeesRemoval(t *testing.T) {
	dir := t.TempDir()
	p, _ := NewVhostUser(VhostUser{SocketDir: dir, Mode: "client"})
	ctx, cancel := context.WithCancel(context.Background())
	changed := make(chan struct{}, 64)
	done := make(chan struct{})
	notify := func() {
		select {
		case changed <- struct{}{}:
		default: // full: the test has been told already
		}
	}
	go func() { defer close(done); p.Watch(ctx, notify) }()
	defer func() { cancel(); <-done }()
	// The watcher starts asynchronously: create sockets until it reports one.
	var ls []net.Listener
	for i := 0; len(changed) == 0; i++ {
		ls = append(ls, listen(t, filepath.Join(dir, fmt.Sprintf("vhu%d.sock", i))))
		select {
		case <-changed:
			changed <- struct{}{}
		case <-time.After(100 * time.Millisecond):
		}
	}
	for len(changed) > 0 {
		<-changed
	}
	if devs, err := p.Scan(); err != nil || healthy(devs) != len(ls) {
		t.Fatalf("before removal: %+v %v", devs, err)
	}
	ls[0].Close() // removes its socket file
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("socket removal not reported")
	}
	// A pod may hold the removed socket: it stays listed, unhealthy.
	devs, _ := p.Scan()
	if len(devs) != len(ls) || healthy(devs) != len(ls)-1 || devs[0].ID != "vhu0.sock" || devs[0].Healthy || devs[0].Reason != "socket removed" {
		t.Fatalf("after removal: %+v", devs)
	}
	// The vswitch creates it again: healthy again.
	listen(t, filepath.Join(dir, "vhu0.sock"))
	if devs, _ := p.Scan(); healthy(devs) != len(ls) || devs[0].Reason != "" {
		t.Fatalf("after the socket is back: %+v", devs)
	}
}

// TestWatchFollowsRecreatedDir: a vswitch that removes its socket directory
// and creates it again (a restart) must not leave the source deaf: the devices
// turn unhealthy with the directory, and sockets in the new directory are seen coming
// and going.
func TestWatchFollowsRecreatedDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "socks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := NewVhostUser(VhostUser{SocketDir: dir, Mode: "client"})
	if err != nil {
		t.Fatal(err)
	}
	// Every notification carries the scan it leads to.
	scans := make(chan int, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- p.Watch(ctx, func() {
			devs, err := p.Scan()
			if err != nil {
				t.Errorf("scan: %v", err)
			}
			scans <- healthy(devs)
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	// waitScan waits for a scan with n healthy devices.
	waitScan := func(what string, n int) {
		t.Helper()
		for {
			select {
			case got := <-scans:
				if got == n {
					return
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no notification leading to %d healthy devices", what, n)
			}
		}
	}
	// The watcher starts asynchronously: create sockets until it reports one.
	var ls []net.Listener
	for i := 0; len(ls) == 0 || len(scans) == 0; i++ {
		ls = append(ls, listen(t, filepath.Join(dir, fmt.Sprintf("first%d.sock", i))))
		select {
		case n := <-scans:
			scans <- n
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The vswitch stops (closing its sockets: a directory with a bound
	// socket in it is only deleted when the socket closes) and removes its
	// directory.
	for _, l := range ls {
		l.Close()
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitScan("directory removed", 0)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := listen(t, filepath.Join(dir, "again.sock"))
	waitScan("socket in the recreated directory", 1)
	l.Close()
	waitScan("socket removed from the recreated directory", 0)
}
