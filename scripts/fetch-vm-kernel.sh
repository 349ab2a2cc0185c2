#!/bin/bash
# Fetch the Debian kernel e2e/vm boots: the pinned linux-image package, downloaded with
# apt-get download and unpacked (never installed) into the cache. Prints the unpacked
# tree's directory on its last line (boot/vmlinuz-*, lib/modules/*).
#
# The pin is a Debian 12 point release's kernel ABI. A mirror drops an ABI at the next
# point release: then the ABI linux-image-amd64 depends on is taken instead, saying so.
# Env: VM_KERNEL (default linux-image-6.1.0-50-amd64), DEVPLUMB_CACHE (default ~/.cache/devplumb)
set -euo pipefail
CACHE=${DEVPLUMB_CACHE:-${HOME:-/root}/.cache/devplumb}
PKG=${VM_KERNEL:-linux-image-6.1.0-50-amd64}
mkdir -p "$CACHE/vm"
exec 9>"$CACHE/vm/kernel.lock"
flock 9
unpacked() { ls "$CACHE/vm/$1"/boot/vmlinuz-* >/dev/null 2>&1; }
if ! unpacked "$PKG"; then
	work=$(mktemp -d "$CACHE/vm/download.XXXXXX")
	chmod 755 "$work" # apt-get download fetches as _apt
	trap 'rm -rf "$work"' EXIT
	if ! (cd "$work" && apt-get download "$PKG" >&2); then
		dep=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1)
		[ -n "$dep" ] || { echo "fetch-vm-kernel: $PKG cannot be downloaded and linux-image-amd64 names no kernel (apt-get update?)" >&2; exit 1; }
		echo "fetch-vm-kernel: $PKG is gone from the mirror: taking $dep, which linux-image-amd64 depends on" >&2
		PKG=$dep
		unpacked "$PKG" || (cd "$work" && apt-get download "$PKG" >&2)
	fi
	if ! unpacked "$PKG"; then
		dpkg-deb -x "$work"/"$PKG"_*.deb "$work/tree"
		rm -rf "$CACHE/vm/$PKG"
		mv "$work/tree" "$CACHE/vm/$PKG"
		echo "fetch-vm-kernel: unpacked $PKG into $CACHE/vm/$PKG" >&2
	fi
fi
echo "$CACHE/vm/$PKG"
