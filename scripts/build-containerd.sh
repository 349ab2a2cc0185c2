#!/bin/bash
# Build containerd (with CDI support: Debian 12's containerd 1.6 has none), its runc shim
# and ctr from the Go module proxy at a pinned version, for e2e/node (the real node).
# runc itself comes from Debian (package runc).
#
# Usage: scripts/build-containerd.sh       # prints the directory holding the binaries
# Env:   CONTAINERD_VERSION (default v1.7.29), DEVPLUMB_CACHE (default ~/.cache/devplumb)
# Use:   export DEVPLUMB_CONTAINERD=$(scripts/build-containerd.sh | tail -1)
set -euo pipefail
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v1.7.29}
MODULE=github.com/containerd/containerd
CACHE=${DEVPLUMB_CACHE:-${HOME:-/root}/.cache/devplumb}
CMDS="containerd containerd-shim-runc-v2 ctr"
OUT=$CACHE/bin/containerd-$CONTAINERD_VERSION
built() { for c in $CMDS; do [ -x "$OUT/$c" ] || return 1; done; }
if built; then echo "$OUT"; exit 0; fi

WORK=$CACHE/build/containerd-$CONTAINERD_VERSION
mkdir -p "$WORK" "$CACHE/bin"
# One build at a time per version: the second waits, then finds the binaries.
exec 9>"$WORK.lock"
flock 9
if built; then echo "$OUT"; exit 0; fi
cd "$WORK"
# Static, without the snapshotters that need cgo or kernel modules the node does not use
# (overlayfs is the one e2e/node configures).
export CGO_ENABLED=0 GOFLAGS="-p=2 -buildvcs=false" GOTOOLCHAIN=local
TAGS=no_btrfs,no_devmapper,no_zfs,no_aufs
printf 'module containerdbuild\n\ngo 1.25.0\n\nrequire %s %s\n' "$MODULE" "$CONTAINERD_VERSION" > go.mod
{
	printf '//go:build tools\n\npackage tools\n\n'
	for c in $CMDS; do printf 'import _ "%s/cmd/%s"\n' "$MODULE" "$c"; done
} > tools.go
go mod tidy
start=$(date +%s)
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
pkgs=""; for c in $CMDS; do pkgs="$pkgs $MODULE/cmd/$c"; done
# shellcheck disable=SC2086 # one word per package
go build -trimpath -tags "$TAGS" -o "$OUT.tmp/" \
	-ldflags="-s -w -X $MODULE/version.Version=$CONTAINERD_VERSION" $pkgs
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
echo "built $CMDS $CONTAINERD_VERSION in $(( $(date +%s) - start ))s" >&2
echo "$OUT"
