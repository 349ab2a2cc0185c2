// Command devplumb-direct is the CNI meta-plugin connecting device plugins and
// CNI plugins (NPWG Device Information Spec 1.1.0), doing the whole call in
// this process: the Kubernetes client, PodResources, the delegates. The
// runtime executes cmd/devplumb, the small entry point, which hands the call
// to the node agent or, without one, execs this binary installed beside it
// (docs/architecture.md, "the node agent"). All logic is in pkg/cni/plugin.
package main

import (
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	pversion "github.com/devplumb/devplumb/pkg/base/version"
	"github.com/devplumb/devplumb/pkg/cni/config"
	"github.com/devplumb/devplumb/pkg/cni/kube"
	"github.com/devplumb/devplumb/pkg/cni/plugin"
)

func main() {
	p := plugin.New()
	p.NewKube = func(kubeconfig string, timeout time.Duration, log *slog.Logger) (plugin.Kube, error) {
		c, err := kube.New(kubeconfig, timeout, log)
		if err != nil {
			return nil, err // not a typed nil inside the interface
		}
		return c, nil
	}
	skel.PluginMainFuncs(p.Funcs(), version.PluginSupports(config.SupportedVersions...),
		"devplumb "+pversion.Get().String()+": CNI meta-plugin for device plugin resources (NPWG device-info spec 1.1.0)")
}
