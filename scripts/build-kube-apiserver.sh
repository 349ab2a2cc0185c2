#!/bin/bash
# Build kube-apiserver from the Go module proxy at a pinned version, for e2e/kubeapi.
#
# k8s.io/kubernetes cannot be fetched with `go install pkg@version`, so it is built in a
# throwaway module (scripts/build-lib.sh gomod_kubernetes).
#
# Usage: scripts/build-kube-apiserver.sh        # prints the binary's path on the last line
# Env:   K8S_VERSION (default v1.37.2), DEVPLUMB_CACHE (default ~/.cache/devplumb)
# Use:   export DEVPLUMB_KUBE_APISERVER=$(scripts/build-kube-apiserver.sh | tail -1)
set -euo pipefail
# shellcheck source=scripts/build-lib.sh
. "$(dirname "$0")/build-lib.sh"
K8S_VERSION=${K8S_VERSION:-v1.37.2}
OUT=$CACHE/bin/kube-apiserver-$K8S_VERSION
built() { [ -x "$OUT" ]; }
build_begin "kube-apiserver-$K8S_VERSION"
gomod_kubernetes kubeapiserverbuild
tools_go k8s.io/kubernetes/cmd/kube-apiserver
build_tidy
go build -trimpath -o "$OUT.tmp.$$" -ldflags="$(k8s_ldflags)" k8s.io/kubernetes/cmd/kube-apiserver
mv "$OUT.tmp.$$" "$OUT"
build_done "kube-apiserver $K8S_VERSION"
