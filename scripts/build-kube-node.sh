#!/bin/bash
# Build the node's Kubernetes binaries — kubelet, kube-scheduler and kube-controller-manager —
# from the Go module proxy at a pinned version, for e2e/node (the real node).
#
# As scripts/build-kube-apiserver.sh: k8s.io/kubernetes is built in a throwaway module
# (scripts/build-lib.sh gomod_kubernetes). The three commands are built by ONE `go build` so
# their shared packages compile once; with the same flags as the apiserver script, the Go
# build cache also shares what the apiserver build compiled.
#
# Usage: scripts/build-kube-node.sh        # prints the directory holding the three binaries
# Env:   K8S_VERSION (default v1.37.2), DEVPLUMB_CACHE (default ~/.cache/devplumb)
# Use:   export DEVPLUMB_KUBE_NODE=$(scripts/build-kube-node.sh | tail -1)
set -euo pipefail
# shellcheck source=scripts/build-lib.sh
. "$(dirname "$0")/build-lib.sh"
K8S_VERSION=${K8S_VERSION:-v1.37.2}
CMDS="kubelet kube-scheduler kube-controller-manager"
OUT=$CACHE/bin/kube-node-$K8S_VERSION
built() { for c in $CMDS; do [ -x "$OUT/$c" ] || return 1; done; }
build_begin "kube-node-$K8S_VERSION"
gomod_kubernetes kubenodebuild
pkgs=""; for c in $CMDS; do pkgs="$pkgs k8s.io/kubernetes/cmd/$c"; done
# shellcheck disable=SC2086 # one word per package
tools_go $pkgs
build_tidy
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
# shellcheck disable=SC2086 # one word per package
go build -trimpath -o "$OUT.tmp/" -ldflags="$(k8s_ldflags)" $pkgs
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
build_done "$CMDS $K8S_VERSION"
