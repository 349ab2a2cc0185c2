#!/bin/bash
# Install QEMU >= 8.0 for e2e/vm when missing and this runs as root. QEMU's igb device
# (an Intel 82576 PF with SR-IOV) came in 8.0; Debian 12's own qemu is 7.2, so on Debian 12
# qemu-system-x86 comes from bookworm-backports, added from the mirror apt already uses.
# Elsewhere (another distribution, not root) it only says what is missing.
set -euo pipefail
QEMU_MIN=8.0
qemu_ok() {
	local v
	v=$(qemu-system-x86_64 --version 2>/dev/null | sed -n 's/^QEMU emulator version \([0-9]*\.[0-9]*\).*/\1/p')
	[ -n "$v" ] && [ "$(printf '%s\n%s\n' "$QEMU_MIN" "$v" | sort -V | head -1)" = "$QEMU_MIN" ]
}
qemu_ok && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "setup-qemu: QEMU >= $QEMU_MIN (qemu-system-x86_64) is missing (run make test as root on Debian to install it)" >&2
	exit 0
fi
# shellcheck source=scripts/apt-lib.sh
. "${0%/*}/apt-lib.sh"
APT_WHO=setup-qemu
export DEBIAN_FRONTEND=noninteractive
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
from=()
if [ "$codename" = bookworm ]; then
	# The mirror of the first deb source apt uses (deb822 or one-line form).
	mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs: *\([^ ]*\/debian\)\/*$/\1/p' | head -1)
	[ -n "$mirror" ] || mirror=$(sed -n 's/^deb \(\[[^]]*\] \)\?\([^ ]*\/debian\)\/* bookworm .*/\2/p' /etc/apt/sources.list 2>/dev/null | head -1)
	mirror=${mirror:-http://deb.debian.org/debian}
	list=/etc/apt/sources.list.d/devplumb-bookworm-backports.list
	echo "setup-qemu: Debian 12's qemu is 7.2 (igb needs $QEMU_MIN): adding bookworm-backports from $mirror ($list) for qemu-system-x86" >&2
	echo "deb $mirror bookworm-backports main" >"$list.tmp" && mv "$list.tmp" "$list"
	from=(-t bookworm-backports)
fi
echo "setup-qemu: installing qemu-system-x86 ${from[*]}" >&2
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${from[@]}" qemu-system-x86
qemu_ok || { echo "setup-qemu: installed qemu-system-x86 is older than $QEMU_MIN: $(qemu-system-x86_64 --version | head -1)" >&2; exit 1; }
echo "setup-qemu: $(qemu-system-x86_64 --version | head -1)" >&2
