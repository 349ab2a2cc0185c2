#!/bin/bash
# A static busybox for each platform of the list that is not this machine's, for the devplumb
# image's shell (make images PLATFORMS=...): Debian's busybox-static of that architecture,
# downloaded with apt-get (into an apt state of its own, so the host's apt is not changed and
# its locks are not taken) and unpacked, never installed, into the cache. Prints one
# "-busybox PLATFORM=PATH" per such platform (images/build's flag); this machine's platform
# uses /bin/busybox (scripts/setup-host.sh installs it).
# Usage: scripts/fetch-busybox.sh linux/amd64,linux/arm64
# Env:   DEVPLUMB_CACHE (default ~/.cache/devplumb)
set -euo pipefail
CACHE=${DEVPLUMB_CACHE:-${HOME:-/root}/.cache/devplumb}
host=$(dpkg --print-architecture 2>/dev/null || go env GOARCH)

# fetch ARCH: the unpacked busybox-static of ARCH (a Debian architecture: arm64, armhf, ...).
fetch() {
	local arch=$1 dir=$CACHE/busybox/$1 apt
	[ -x "$dir/bin/busybox" ] && { echo "$dir/bin/busybox"; return; }
	mkdir -p "$CACHE/busybox"
	apt=$(mktemp -d "$CACHE/busybox/apt-$arch.XXXXXX")
	trap 'rm -rf "$apt"' RETURN
	mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/deb"
	touch "$apt/status"
	local opts=(-q -o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/status"
		-o "Dir::Cache=$apt" -o "Dir::Cache::archives=$apt/archives"
		-o "APT::Architecture=$arch" -o "APT::Architectures=$arch" -o APT::Sandbox::User=root)
	apt-get "${opts[@]}" update >&2 || { echo "fetch-busybox: apt-get update for $arch failed" >&2; return 1; }
	(cd "$apt/deb" && apt-get "${opts[@]}" download "busybox-static:$arch" >&2) ||
		{ echo "fetch-busybox: apt-get download busybox-static:$arch failed" >&2; return 1; }
	dpkg-deb -x "$apt"/deb/busybox-static_*.deb "$apt/tree"
	rm -rf "$dir"
	mv "$apt/tree" "$dir"
	echo "fetch-busybox: unpacked busybox-static:$arch into $dir" >&2
	echo "$dir/bin/busybox"
}

mkdir -p "$CACHE"
exec 9>"$CACHE/busybox.lock"
flock 9
IFS=, read -ra platforms <<<"${1:?usage: fetch-busybox.sh PLATFORM[,PLATFORM...] (e.g. linux/amd64,linux/arm64)}"
for p in "${platforms[@]}"; do
	IFS=/ read -r os goarch variant <<<"$p"
	[ "$os" = linux ] || { echo "fetch-busybox: $p: only linux platforms" >&2; exit 1; }
	case $goarch/${variant:-} in
	arm/v7 | arm/) arch=armhf ;;
	arm/v6 | arm/v5) arch=armel ;;
	386/) arch=i386 ;;
	ppc64le/) arch=ppc64el ;;
	*) arch=$goarch ;;
	esac
	[ "$arch" = "$host" ] && continue
	echo "-busybox $p=$(fetch "$arch")"
done
