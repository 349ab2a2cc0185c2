#!/bin/bash
# Build the node's Kubernetes binaries — kubelet, kube-scheduler and kube-controller-manager —
# from the Go module proxy at a pinned version, for e2e/node (the real node).
#
# As scripts/build-kube-apiserver.sh: k8s.io/kubernetes is built in a throwaway module that
# requires it at the pinned tag and replaces every staging module by its published
# v0.<minor>.<patch> version. The three commands are built by ONE `go build` so their shared
# packages compile once; with the same flags as the apiserver script, the Go build cache also
# shares what the apiserver build compiled.
#
# Usage: scripts/build-kube-node.sh        # prints the directory holding the three binaries
# Env:   K8S_VERSION (default v1.34.12), DEVPLUMB_CACHE (default ~/.cache/devplumb)
# Use:   export DEVPLUMB_KUBE_NODE=$(scripts/build-kube-node.sh | tail -1)
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.34.12}
CACHE=${DEVPLUMB_CACHE:-${HOME:-/root}/.cache/devplumb}
CMDS="kubelet kube-scheduler kube-controller-manager"
OUT=$CACHE/bin/kube-node-$K8S_VERSION
built() { for c in $CMDS; do [ -x "$OUT/$c" ] || return 1; done; }
if built; then echo "$OUT"; exit 0; fi

STAGING_VERSION=v0.${K8S_VERSION#v1.}
MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
WORK=$CACHE/build/kube-node-$K8S_VERSION
mkdir -p "$WORK" "$CACHE/bin"
# One build at a time per version (parallel CI jobs share the cache): the second waits,
# then finds the binaries the first made.
exec 9>"$WORK.lock"
flock 9
if built; then echo "$OUT"; exit 0; fi
cd "$WORK"
export CGO_ENABLED=0 GOFLAGS="-p=2 -buildvcs=false"
# The checksum database has no entry for k8s.io/kubernetes tags as seen from here.
export GONOSUMDB=${GONOSUMDB:-k8s.io/kubernetes}
export GOTOOLCHAIN=local

# The staging module list comes from k8s.io/kubernetes's own go.mod at that tag.
printf 'module probe\ngo 1.25.0\n' > go.mod
go mod download -json "k8s.io/kubernetes@$K8S_VERSION" > dl.json
MODFILE=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' dl.json)
STAGING=$(grep -E '^\s*k8s.io/\S+ => ./staging' "$MODFILE" | awk '{print $1}')
if [ -z "$STAGING" ]; then echo "no staging modules found in $MODFILE" >&2; exit 1; fi
{
	echo "module kubenodebuild"
	echo "go 1.25.0"
	echo "require k8s.io/kubernetes $K8S_VERSION"
	echo "replace ("
	for m in $STAGING; do echo "	$m => $m $STAGING_VERSION"; done
	echo ")"
} > go.mod
{
	printf '//go:build tools\n\npackage tools\n\n'
	for c in $CMDS; do printf 'import _ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
} > tools.go
go mod tidy
start=$(date +%s)
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
pkgs=""; for c in $CMDS; do pkgs="$pkgs k8s.io/kubernetes/cmd/$c"; done
# shellcheck disable=SC2086 # one word per package
go build -trimpath -o "$OUT.tmp/" \
	-ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$MINOR" \
	$pkgs
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "built $CMDS $K8S_VERSION in $(( $(date +%s) - start ))s" >&2
echo "$OUT"
