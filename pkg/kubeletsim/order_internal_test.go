package kubeletsim

import (
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"
)

// TestControlSocketBeforePodResources: scripts take the PodResources socket for the
// node being there (scripts/demo-dra.sh) and then use the control socket
// (`nodesim wait`): it must exist by then, and a request made at that moment is
// answered once the node has started.
func TestControlSocketBeforePodResources(t *testing.T) {
	dir, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	answered := make(chan error, 1)
	podResourcesServed = func() {
		c, err := NewControlClient(dir)
		if err != nil {
			answered <- err
			return
		}
		go func() {
			_, err := c.Pods(t.Context())
			answered <- err
		}()
	}
	t.Cleanup(func() { podResourcesServed = func() {} })
	n, err := Start(t.Context(), dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("control socket as the PodResources socket appears: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a request made as the PodResources socket appeared is not answered")
	}
}

// TestControlSocketListensOnceItExists: a client that finds the control socket
// can connect (its request waits in the backlog); the file must never exist
// bound but not listening, as it does between a bind and its listen. A poller
// dials the moment the file appears, over many starts.
func TestControlSocketListensOnceItExists(t *testing.T) {
	dir, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.MkdirAll(StateDir(dir), 0o750); err != nil {
		t.Fatal(err)
	}
	path := ControlSocket(dir)
	for i := range 300 {
		refused := make(chan error, 1)
		stop := make(chan struct{})
		go func() { refused <- dialWhenThere(path, stop) }()
		lis, err := listenControl(dir)
		if err != nil {
			t.Fatal(err)
		}
		close(stop)
		if err := <-refused; err != nil {
			t.Fatalf("start %d: the control socket existed and refused: %v", i, err)
		}
		if err := lis.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Fatalf("start %d: the control socket stays after close: %v", i, err)
		}
	}
}

// dialWhenThere polls for path until stop and dials it once it exists.
func dialWhenThere(path string, stop <-chan struct{}) error {
	for {
		if _, err := os.Lstat(path); err == nil {
			c, err := net.Dial("unix", path)
			if err != nil {
				return err
			}
			return c.Close()
		}
		select {
		case <-stop:
			return nil
		default:
		}
	}
}
