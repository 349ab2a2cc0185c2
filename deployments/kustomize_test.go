package deployments

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// build runs kustomize (the library kubectl apply -k uses) on dir.
func build(t *testing.T, dir string) string {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// The kustomization applies exactly the plain manifests, and an overlay's
// image override reaches both DaemonSets.
func TestKustomization(t *testing.T) {
	wantBuilt(t, ".", plain(t))
	checkOverlayImages(t, ".")
}

// An overlay of deployments/ with the dra/ Component applies the plain manifests with
// netdev-dp as a DRA driver: deployments/ without the device-plugin DaemonSet and
// ConfigMap, plus dra/'s objects.
func TestKustomizationDRA(t *testing.T) {
	overlay := t.TempDir()
	base, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(overlay, base)
	if err != nil {
		t.Fatal(err)
	}
	k := "resources:\n- " + rel + "\ncomponents:\n- " + filepath.Join(rel, "dra") + "\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	wantBuilt(t, overlay, plainDRA(t))
	checkOverlayImages(t, overlay)
}

// wantBuilt: kustomize builds dir into exactly the objects of want (by kind, namespace, name).
func wantBuilt(t *testing.T, dir string, want map[string]runtime.Object) {
	t.Helper()
	got := map[string]bool{}
	for _, obj := range decodeDocs(t, dir, []byte(build(t, dir))) {
		got[key(t, obj)] = true
	}
	if len(got) != len(want) {
		t.Fatalf("kustomize builds %v from %s, the manifests hold %d objects", got, dir, len(want))
	}
	for k := range want {
		if !got[k] {
			t.Errorf("kustomize build of %s lacks %s", dir, k)
		}
	}
}

// checkOverlayImages: an overlay of dir with an image override reaches every DaemonSet.
func checkOverlayImages(t *testing.T, dir string) {
	t.Helper()
	overlay := t.TempDir()
	base, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(overlay, base)
	if err != nil {
		t.Fatal(err)
	}
	k := "resources:\n- " + rel + "\nimages:\n- {name: devplumb, newName: registry.example/devplumb, newTag: v1.2.3}\n- {name: netdev-dp, newName: registry.example/netdev-dp, newTag: v1.2.3}\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, line := range strings.Split(build(t, overlay), "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "image: ") {
			images = append(images, strings.TrimPrefix(l, "image: "))
		}
	}
	slices.Sort(images)
	images = slices.Compact(images)
	if !slices.Equal(images, []string{"registry.example/devplumb:v1.2.3", "registry.example/netdev-dp:v1.2.3"}) {
		t.Errorf("overlay images = %v", images)
	}
}
