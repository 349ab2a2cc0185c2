#!/bin/bash
# Build containerd (with CDI support: Debian 12's containerd 1.6 has none), its runc shim
# and ctr from the Go module proxy at a pinned version, for e2e/node (the real node).
# runc itself comes from Debian (package runc).
#
# Usage: scripts/build-containerd.sh       # prints the directory holding the binaries
# Env:   CONTAINERD_VERSION (default v2.4.2; a v1.x version builds the v1 module), DEVPLUMB_CACHE (default ~/.cache/devplumb)
# Use:   export DEVPLUMB_CONTAINERD=$(scripts/build-containerd.sh | tail -1)
set -euo pipefail
# shellcheck source=scripts/build-lib.sh
. "$(dirname "$0")/build-lib.sh"
CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
# containerd 2 is the module github.com/containerd/containerd/v2 (commands and version
# package moved with it); 1.x is the module without the suffix.
case $CONTAINERD_VERSION in
v1.*) MODULE=github.com/containerd/containerd ;;
*) MODULE=github.com/containerd/containerd/${CONTAINERD_VERSION%%.*} ;;
esac
CMDS="containerd containerd-shim-runc-v2 ctr"
OUT=$CACHE/bin/containerd-$CONTAINERD_VERSION
built() { for c in $CMDS; do [ -x "$OUT/$c" ] || return 1; done; }
build_begin "containerd-$CONTAINERD_VERSION"
# Static, without the snapshotters that need cgo or kernel modules the node does not use
# (overlayfs is the one e2e/node configures).
TAGS=no_btrfs,no_devmapper,no_zfs,no_aufs
gomod_require containerdbuild "$MODULE" "$CONTAINERD_VERSION"
pkgs=""; for c in $CMDS; do pkgs="$pkgs $MODULE/cmd/$c"; done
# shellcheck disable=SC2086 # one word per package
tools_go $pkgs
build_tidy
rm -rf "$OUT.tmp"; mkdir -p "$OUT.tmp"
# shellcheck disable=SC2086 # one word per package
go build -trimpath -tags "$TAGS" -o "$OUT.tmp/" \
	-ldflags="-s -w -X $MODULE/version.Version=$CONTAINERD_VERSION" $pkgs
rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
build_done "$CMDS $CONTAINERD_VERSION"
