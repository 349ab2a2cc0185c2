#!/bin/bash
# Build kube-apiserver from the Go module proxy at a pinned version, for e2e/kubeapi.
#
# k8s.io/kubernetes cannot be fetched with `go install pkg@version` (the proxy refuses to
# list its versions and its staging modules are replaced by relative paths), so it is built
# in a throwaway module that requires k8s.io/kubernetes at the pinned tag and replaces every
# staging module by its published v0.<minor>.<patch> version.
#
# Usage: scripts/build-kube-apiserver.sh        # prints the binary's path on the last line
# Env:   K8S_VERSION (default v1.34.12), DEVPLUMB_CACHE (default ~/.cache/devplumb)
# Use:   export DEVPLUMB_KUBE_APISERVER=$(scripts/build-kube-apiserver.sh | tail -1)
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.34.12}
CACHE=${DEVPLUMB_CACHE:-${HOME:-/root}/.cache/devplumb}
OUT=$CACHE/bin/kube-apiserver-$K8S_VERSION
if [ -x "$OUT" ]; then echo "$OUT"; exit 0; fi

STAGING_VERSION=v0.${K8S_VERSION#v1.}
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
WORK=$CACHE/build/kube-apiserver-$K8S_VERSION
mkdir -p "$WORK" "$CACHE/bin"
# One build at a time per version (parallel CI jobs share the cache): the second waits,
# then finds the binary the first made.
exec 9>"$WORK.lock"
flock 9
if [ -x "$OUT" ]; then echo "$OUT"; exit 0; fi
cd "$WORK"
export CGO_ENABLED=0 GOFLAGS="-p=2 -buildvcs=false"
# The checksum database has no entry for k8s.io/kubernetes tags as seen from here.
export GONOSUMDB=${GONOSUMDB:-k8s.io/kubernetes}
export GOTOOLCHAIN=local

# The staging module list comes from k8s.io/kubernetes's own go.mod at that tag.
go mod download -json "k8s.io/kubernetes@$K8S_VERSION" > dl.json 2>/dev/null || true
MODFILE=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' dl.json)
if [ -z "$MODFILE" ] || [ ! -f "$MODFILE" ]; then
	printf 'module probe\ngo 1.25.0\n' > go.mod
	go mod download -json "k8s.io/kubernetes@$K8S_VERSION" > dl.json
	MODFILE=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' dl.json)
fi
STAGING=$(grep -E '^\s*k8s.io/\S+ => ./staging' "$MODFILE" | awk '{print $1}')
if [ -z "$STAGING" ]; then echo "no staging modules found in $MODFILE" >&2; exit 1; fi
{
	echo "module kubeapiserverbuild"
	echo "go 1.25.0"
	echo "require k8s.io/kubernetes $K8S_VERSION"
	echo "replace ("
	for m in $STAGING; do echo "	$m => $m $STAGING_VERSION"; done
	echo ")"
} > go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' > tools.go
go mod tidy
start=$(date +%s)
go build -trimpath -o "$OUT.tmp.$$" \
	-ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR" \
	k8s.io/kubernetes/cmd/kube-apiserver
mv "$OUT.tmp.$$" "$OUT"
echo "built kube-apiserver $K8S_VERSION in $(( $(date +%s) - start ))s" >&2
echo "$OUT"
