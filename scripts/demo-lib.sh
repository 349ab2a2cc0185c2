# Sourced by scripts/demo.sh and scripts/demo-dra.sh: what both demos do alike. The
# sourcing script sets DEMO (its name, for messages and lock waits) and ROOT and PIDS
# as it goes, and defines remove_node.

if [ -t 1 ]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD="" PLAIN=""; fi
say()  { STEP=$1; printf '\n%s== %s%s\n' "$BOLD" "$*" "$PLAIN"; }
fail() { echo "$DEMO: $*" >&2; exit 1; }

# one_at_a_time: runs of one demo share the netns and link names. The lock is on the
# demo's script, so it leaves no file; the daemons do not inherit it (9<&-).
one_at_a_time() {
	exec 9<"$0"
	if ! flock -n 9; then
		echo "another make $DEMO is running on this machine: waiting up to 60 s for it to finish"
		flock -w 60 9 || fail "another make $DEMO is still running; try again when it has finished"
	fi
}

# forget_killed_runs GLOB: a run killed with SIGKILL left its root, whose pids file
# names its daemons; stop those still running from that root, then remove it all.
forget_killed_runs() {
	local old pid
	for old in $1; do
		[ -d "$old" ] || continue
		echo "removing what a killed $DEMO run left: $old"
		for pid in $(cut -d' ' -f1 "$old/pids" 2>/dev/null); do
			grep -qF "$old" "/proc/$pid/cmdline" 2>/dev/null && kill -KILL "$pid"
		done
		rm -rf "$old"
	done
	remove_node ""
}

# show_logs: what the daemons said, for a failed step (their logs go with ROOT).
show_logs() {
	local f
	for f in "$ROOT"/logs/*.log; do
		[ -s "$f" ] || continue
		echo "--- last lines of $(basename "$f"):" >&2
		tail -n 15 "$f" >&2
	done
}

# start NAME COMMAND...: a daemon in the background, logging to ROOT/logs/NAME.log.
start() {
	local name=$1; shift
	"$@" 2>"$ROOT/logs/$name.log" 9<&- &
	PIDS+=($!)
	echo "$! $name" >>"$ROOT/pids"
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
	local until=$(( $(date +%s) + $1 )) what=$2; shift 2
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$until" ] || fail "timed out waiting for $what"
		sleep 0.2
	done
}

# check COMMAND...: one verdict of the last step, for the thing named in $what.
left=0
check() { if "$@"; then echo "ok: $what"; else echo "LEFT: $what"; left=1; fi; }

# nothing_left SOCKETS RESULTS: the last step's verdicts, then the end of the demo: no pod
# netns, the pool's VETHS back on the host, no device-info file, no devplumb attachment
# record, no CDI spec, no socket below SOCKETS, the daemons of DAEMONS ("pid name" lines)
# stopped, and no cnitool result cache file matching RESULTS (grep -E).
nothing_left() {
	local v pid name
	what="no pod netns";                check bash -c "! ip netns list | grep -qw $NETNS"
	for v in "${VETHS[@]}"; do what="$v back on the host"; check bash -c "ip link show $v >/dev/null"; done
	what="no device-info file";         check bash -c "[ -z \"\$(find '$ROOT/devinfo' -type f 2>/dev/null)\" ]"
	what="no attachment record";        check bash -c "[ -z \"\$(find '$ROOT/devplumb' -name '*.json' 2>/dev/null)\" ]"
	what="no CDI spec";                 check bash -c "[ -z \"\$(find '$ROOT/cdi' -type f 2>/dev/null)\" ]"
	what="no socket";                   check bash -c "[ -z \"\$(find '$1' -type s 2>/dev/null)\" ]"
	while read -r pid name; do what="$name stopped"; check bash -c "! kill -0 $pid 2>/dev/null"; done <<<"$DAEMONS"
	what="no cnitool result cache";     check bash -c "! ls /var/lib/cni/results/ 2>/dev/null | grep -qE '$2'"
	[ "$left" = 0 ] || fail "something was left behind"
	echo "$DEMO done: all clean"
}
