package imagebuild

import (
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteIndex writes specs, one image per platform of one reference, as an OCI image
// layout in dir whose index lists each image with its platform: what registries serve
// as a multi-platform image (`crane push DIR REF`, `skopeo copy --all oci:DIR ...`).
// dir is replaced as a whole.
func WriteIndex(specs []Spec, dir string) error {
	if len(specs) == 0 {
		return fmt.Errorf("imagebuild: an index needs at least one image")
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("imagebuild: oci layout %s: %w", dir, err)
	}
	for _, spec := range specs {
		img, tag, err := Image(spec)
		if err != nil {
			return err
		}
		// An OCI index lists OCI manifests (the docker-archive keeps Docker's types).
		img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
		plat := spec.platform()
		if err := p.AppendImage(img, layout.WithPlatform(plat), layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": tag.String()})); err != nil {
			return fmt.Errorf("imagebuild: %s for %s: %w", spec.Ref, platformString(plat), err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("imagebuild: %w", err)
	}
	return nil
}

func platformString(p v1.Platform) string {
	s := p.OS + "/" + p.Architecture
	if p.Variant != "" {
		s += "/" + p.Variant
	}
	return s
}
