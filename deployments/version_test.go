package deployments

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/devplumb/devplumb/images"
)

// imageRE is an image reference of the project's images in a manifest.
var imageRE = regexp.MustCompile(`(?m)^\s*image: ((?:devplumb|netdev-dp):\S+)$`)

// Every manifest names the project's images by the one release the chart's appVersion
// gives, the tag `make images` puts on that release's images (its VERSION): an upgrade
// rolls from one tag to another, never to a moving ":dev".
func TestManifestsNameTheReleaseTag(t *testing.T) {
	version, err := images.ShippedVersion("..")
	if err != nil {
		t.Fatal(err)
	}
	dp, nd, err := images.Refs(version)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("*.yaml")
	dra, _ := filepath.Glob("dra/*.yaml")
	seen := 0
	for _, f := range append(files, dra...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range imageRE.FindAllStringSubmatch(string(b), -1) {
			seen++
			if m[1] != dp && m[1] != nd {
				t.Errorf("%s names image %s, want %s or %s (the chart's appVersion)", f, m[1], dp, nd)
			}
		}
	}
	if seen < 4 {
		t.Errorf("found %d image references in the manifests, want the DaemonSets' (4)", seen)
	}
	checkTags(t, "kustomization.yaml", version, func(b []byte) ([]string, error) {
		var k struct{ Images []struct{ NewTag string } }
		err := yaml.Unmarshal(b, &k)
		var tags []string
		for _, i := range k.Images {
			tags = append(tags, i.NewTag)
		}
		return tags, err
	})
	checkTags(t, "helm/devplumb/values.yaml", version, func(b []byte) ([]string, error) {
		var v struct {
			Devplumb, NetdevDP struct{ Image struct{ Tag string } }
		}
		err := yaml.Unmarshal(b, &v)
		return []string{v.Devplumb.Image.Tag, v.NetdevDP.Image.Tag}, err
	})
}

// checkTags reads the image tags file sets with tags and wants each to be version.
func checkTags(t *testing.T, file, version string, tags func([]byte) ([]string, error)) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tags(b)
	if err != nil || len(got) != 2 {
		t.Fatalf("%s: image tags %v (%v), want two", file, got, err)
	}
	for _, tag := range got {
		if tag != version {
			t.Errorf("%s: image tag %q, want %q (the chart's appVersion)", file, tag, version)
		}
	}
}
