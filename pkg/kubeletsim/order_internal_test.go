package kubeletsim

import (
	"io"
	"log/slog"
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
