package podresources_test

import (
	"fmt"
	"log/slog"
	"testing"

	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/devplumb/devplumb/podresources"
	"github.com/devplumb/devplumb/podresources/podresourcestest"
)

// BenchmarkDevices looks up one pod's devices through Get and through List
// (the fallback) on nodes with 10, 110 (the default max pods) and 1000 pods.
func BenchmarkDevices(b *testing.B) {
	for _, mode := range []string{"Get", "List"} {
		for _, pods := range []int{10, 110, 1000} {
			b.Run(fmt.Sprintf("%s/pods=%d", mode, pods), func(b *testing.B) {
				opts := []podresourcestest.ServerOption{podresourcestest.WithoutRateLimit()}
				if mode == "List" {
					opts = append(opts, podresourcestest.WithGetDisabled())
				}
				srv := podresourcestest.NewServer(b, opts...)
				for i := range pods {
					srv.SetPod(benchPod(i))
				}
				c, err := podresources.New(srv.Socket, podresources.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				target := fmt.Sprintf("pod-%d", pods/2)
				for b.Loop() {
					ids, err := c.Devices(b.Context(), "bench", target, res)
					if err != nil || len(ids) != 2 {
						b.Fatalf("Devices = %v, %v", ids, err)
					}
				}
			})
		}
	}
}

func benchPod(i int) *v1.PodResources {
	return &v1.PodResources{Namespace: "bench", Name: fmt.Sprintf("pod-%d", i), Containers: []*v1.ContainerResources{{
		Name: "main",
		Devices: []*v1.ContainerDevices{{ResourceName: res,
			DeviceIds: []string{fmt.Sprintf("0000:%02x:00.%d", i/8%256, i%8), fmt.Sprintf("0001:%02x:00.%d", i/8%256, i%8)},
			Topology:  &v1.TopologyInfo{Nodes: []*v1.NUMANode{{ID: int64(i % 2)}}}}},
		CpuIds: []int64{int64(i % 64)},
	}}}
}
