package images

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// versionVar is the variable `make build` stamps the version into (-X).
const versionVar = "github.com/devplumb/devplumb/pkg/base/version.version"

// devTag is the images' tag when no version is given (go test, e2e/node):
// what the DaemonSets in deployments/ named before images carried versions.
const devTag = "dev"

// tagRE is what a registry takes as a tag (the OCI distribution spec).
var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Refs are the references of the devplumb and netdev-dp images of version:
// "devplumb:<version>", or DevplumbRef and NetdevDPRef when version is "". A
// version that cannot be a tag (a "+build" suffix, say) is an error, not a
// silently different tag: two images one can tell apart must carry the version
// their binaries report.
func Refs(version string) (devplumb, netdevDP string, err error) {
	if version == "" {
		return DevplumbRef, NetdevDPRef, nil
	}
	if !tagRE.MatchString(version) {
		return "", "", fmt.Errorf("images: version %q cannot be an image tag (letters, digits, '_', '.' and '-', "+
			"at most 128, not starting with '.' or '-')", version)
	}
	return "devplumb:" + version, "netdev-dp:" + version, nil
}

// buildTags are the build tags of a main package, as the Makefile's build
// target has them: devplumb-direct starts once per CNI call without an agent,
// and without gRPC's x/net/trace (grpcnotrace) it starts faster and is smaller;
// the agent keeps less memory.
var buildTags = map[string]string{"./cmd/devplumb-direct": "grpcnotrace", "./cmd/devplumb-agent": "grpcnotrace"}

// goBuildArgs are the arguments of `go build` for pkgs (which share their
// tags) into dir: the Makefile's STATIC, -trimpath and -ldflags '-s -w' with
// the version stamp when version is set (CGO_ENABLED=0 is the caller's env).
// images_test compares them with `make -n build`.
func goBuildArgs(version, tags, dir string, pkgs ...string) []string {
	ldflags := "-s -w"
	if version != "" {
		ldflags += " -X " + versionVar + "=" + version
	}
	args := []string{"build", "-trimpath", "-ldflags=" + ldflags}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	return append(append(args, "-o", dir+"/"), pkgs...)
}

// byTags groups pkgs by their build tags, in a stable order: one go build each.
func byTags(pkgs []string) [][]string {
	groups := map[string][]string{}
	for _, p := range pkgs {
		groups[buildTags[p]] = append(groups[buildTags[p]], p)
	}
	var out [][]string
	for _, tags := range slices.Sorted(maps.Keys(groups)) {
		out = append(out, groups[tags])
	}
	return out
}

// describe is a go build for an error message.
func describe(args []string) string { return "go " + strings.Join(args, " ") }

// chartFile holds the release the manifests in deployments/ name: the Helm chart's
// appVersion. The plain manifests, the chart's values and the kustomization name the
// images by that tag (deployments/version_test.go keeps them equal).
const chartFile = "deployments/helm/devplumb/Chart.yaml"

// ShippedVersion is the version the manifests under root/deployments name their images
// by: build images with it (Options.Version) to run those manifests unchanged.
func ShippedVersion(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, chartFile))
	if err != nil {
		return "", fmt.Errorf("images: the shipped version: %w", err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		return "", fmt.Errorf("images: %s: %w", chartFile, err)
	}
	if _, _, err := Refs(chart.AppVersion); err != nil || chart.AppVersion == "" {
		return "", fmt.Errorf("images: %s: appVersion %q is not an image tag", chartFile, chart.AppVersion)
	}
	return chart.AppVersion, nil
}
