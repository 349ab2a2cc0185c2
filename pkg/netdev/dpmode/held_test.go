package dpmode

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/devplumb/devplumb/devinfo"
	"github.com/devplumb/devplumb/pkg/cdispec"
	"github.com/devplumb/devplumb/pkg/deviceplugin"
	"github.com/devplumb/devplumb/pkg/netdev/netdevtest"
	"github.com/devplumb/devplumb/pkg/netdev/source"
)

// stoppingResource is a resource of VFs a and b (described, files and spec written)
// whose plugin serves only those in served, as at the stop of a run.
func stoppingResource(t *testing.T, served ...string) *resource {
	t.Helper()
	cdi, err := cdispec.New(t.TempDir(), netdevtest.ResVF)
	if err != nil {
		t.Fatal(err)
	}
	dp, err := deviceplugin.New(deviceplugin.Config{ResourceName: netdevtest.ResVF, PluginDir: t.TempDir(),
		Allocate: func(context.Context, []string) (*pluginapi.ContainerAllocateResponse, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	r := &resource{name: netdevtest.ResVF, store: devinfo.NewStore(t.TempDir()), log: slog.Default(),
		files: map[string]*devinfo.DeviceInfo{}, cdi: cdi, dp: dp}
	var all []source.Device
	for _, id := range []string{"0000:01:01.0", "0000:01:01.1"} {
		all = append(all, source.Device{Device: deviceplugin.Device{ID: id, Healthy: true}, Info: pciInfo(id)})
	}
	if errs := r.syncFiles(source.Index(all)); len(errs) != 0 {
		t.Fatal(errs)
	}
	if err := cdi.Write(all); err != nil {
		t.Fatal(err)
	}
	var serve []source.Device
	for _, d := range all {
		if slices.Contains(served, d.ID) {
			serve = append(serve, d)
		}
	}
	dp.Update(toPlugin(serve))
	return r
}

// specNames are the device names in r's CDI spec; nil when it is gone.
func specNames(t *testing.T, r *resource) []string {
	t.Helper()
	data, err := os.ReadFile(r.cdi.Path())
	if os.IsNotExist(err) {
		return nil
	}
	var spec struct{ Devices []struct{ Name string } }
	if err != nil || json.Unmarshal(data, &spec) != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	var out []string
	for _, d := range spec.Devices {
		out = append(out, d.Name)
	}
	return out
}

// cleanup keeps the file and spec entry of a held device and removes a free one's; a
// held device the run does not serve (it never scanned) keeps the whole spec.
func TestCleanupKeepsHeldDevices(t *testing.T) {
	a, b := "0000:01:01.0", "0000:01:01.1"
	for _, c := range []struct {
		name         string
		served, held []string
		files, spec  []string
	}{
		{"one held", []string{a, b}, []string{a}, []string{a}, []string{cdispec.DeviceName(a)}},
		{"none held", []string{a, b}, nil, nil, nil},
		{"held but not served", []string{a}, []string{a, b}, []string{a, b}, []string{cdispec.DeviceName(a), cdispec.DeviceName(b)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := stoppingResource(t, c.served...)
			held := map[string]bool{}
			for _, id := range c.held {
				held[id] = true
			}
			if err := r.cleanup(held); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{a, b} {
				_, err := r.store.ReadDP(r.name, id)
				if want := slices.Contains(c.files, id); (err == nil) != want {
					t.Errorf("device-info of %s: %v, want kept %v", id, err, want)
				}
			}
			if got := specNames(t, r); !slices.Equal(got, c.spec) {
				t.Errorf("CDI spec lists %v, want %v", got, c.spec)
			}
		})
	}
}
