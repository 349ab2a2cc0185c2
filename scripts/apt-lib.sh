# Sourced by scripts/setup-host.sh and .ci/run: apt-get that waits for another apt.
#
# On a fresh VM another apt (unattended-upgrades, cloud-init) often holds apt's locks for a
# minute or more: wait for it rather than fail. apt's own -o DPkg::Lock::Timeout waits for
# the dpkg locks (install), but apt 2.6 (Debian 12) does not apply it to the lists lock
# (/var/lib/apt/lists/lock) of apt-get update, which fails at once: a run that failed on a
# lock is tried again, with apt's timeout, until APT_LOCK_WAIT seconds have passed. The
# caller sets APT_WHO, its name for the message.
APT_LOCK_WAIT=${APT_LOCK_WAIT:-600}

# apt_get ARGS...: apt-get (its output on stderr) waiting for another apt's locks, saying
# so in one line. The first try does not wait, so that the line is printed only when a
# lock is held.
apt_get() {
	local deadline=$((SECONDS + APT_LOCK_WAIT)) wait=0 err rc=0
	err=$(mktemp)
	until apt-get -o DPkg::Lock::Timeout="$wait" "$@" >&2 2>"$err"; do
		if ! grep -q "Could not get lock" "$err" || [ "$SECONDS" -ge "$deadline" ]; then
			rc=1
			break
		fi
		[ "$wait" != 0 ] || echo "$APT_WHO: waiting up to $APT_LOCK_WAIT s for another apt to finish: $(grep -m1 -o 'Could not get lock.*' "$err")" >&2
		wait=$((deadline - SECONDS))
		sleep 1
	done
	cat "$err" >&2
	rm -f "$err"
	return "$rc"
}
