package kubeapi_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devplumb/devplumb/e2e/e2etest"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/cni/nodecache"
	"github.com/devplumb/devplumb/pkg/testenv"
)

// The node agent's cache on the real API server holds its node's pods and
// slices only (the API server selects them), answers a pod only for the UID
// asked (a pod deleted and made again under its name is a miss until the
// watch brings the new one), answers a claim its pods name only while the
// claim is reserved for one of them, and misses everything once closed.
func TestNodeCacheHoldsItsNodeOnly(t *testing.T) {
	ns, other := "default", "node-elsewhere"
	cfg, err := kube.LoadConfig(srv.Kubeconfig)
	e2etest.Must(t, err)
	m := nodecache.NewMetrics()
	c, err := nodecache.New(cfg, nodeName, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
	e2etest.Must(t, err)
	defer c.Close()
	name := testenv.UniqueName("nc")
	mine, err := srv.CreatePod(e2etest.Ctx(t), ns, name, nodeName, nil)
	e2etest.Must(t, err)
	theirs, err := srv.CreatePod(e2etest.Ctx(t), ns, name+"-x", other, nil)
	e2etest.Must(t, err)
	waitFor(t, "the node's pod held", func() error { return held(c.Pod(ns, mine.Name, string(mine.UID))) })
	if _, ok := c.Pod(ns, theirs.Name, ""); ok {
		t.Error("another node's pod is held")
	}

	e2etest.Must(t, srv.DeletePod(e2etest.Ctx(t), ns, name))
	again, err := srv.CreatePod(e2etest.Ctx(t), ns, name, nodeName, nil)
	e2etest.Must(t, err)
	waitFor(t, "the pod made again held", func() error { return held(c.Pod(ns, name, string(again.UID))) })
	if _, ok := c.Pod(ns, name, string(mine.UID)); ok {
		t.Error("the deleted pod's UID is answered")
	}

	slice := func(node string) *resourcev1.ResourceSlice {
		s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: testenv.UniqueName("nc-slice")},
			Spec: resourcev1.ResourceSliceSpec{Driver: "nc.devplumb.io", NodeName: &node,
				Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: []resourcev1.Device{{Name: "d0"}}}}
		out, err := srv.Client.ResourceV1().ResourceSlices().Create(e2etest.Ctx(t), s, metav1.CreateOptions{})
		e2etest.Must(t, err)
		t.Cleanup(func() {
			_ = srv.Client.ResourceV1().ResourceSlices().Delete(e2etest.Ctx(t), out.Name, metav1.DeleteOptions{})
		})
		return out
	}
	own, _ := slice(nodeName), slice(other)
	waitFor(t, "the node's slice held", func() error {
		if l, ok := c.ResourceSlices(nodeName, "nc.devplumb.io"); !ok || len(l) != 1 || l[0].Name != own.Name {
			return fmt.Errorf("slices %v (synced %v), want %s", l, ok, own.Name)
		}
		return nil
	})
	if _, ok := c.ResourceSlices(other, "nc.devplumb.io"); ok {
		t.Error("another node's slices are answered")
	}
	if held := m.Held(); held["pod"] != podsOn(t, nodeName) || held["resourceslice"] != 1 {
		t.Errorf("held %v: want this node's %d pods and one slice", held, podsOn(t, nodeName))
	}

	c.Close()
	if _, ok := c.Pod(ns, name, ""); ok {
		t.Error("a closed cache answers")
	}
}

// podsOn counts the pods the API server has on node.
func podsOn(t *testing.T, node string) int {
	t.Helper()
	l, err := srv.Client.CoreV1().Pods("").List(e2etest.Ctx(t), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	e2etest.Must(t, err)
	return len(l.Items)
}

// held is a cache lookup's hit as waitFor wants it.
func held[T any](_ T, ok bool) error {
	if !ok {
		return errors.New("not held")
	}
	return nil
}
