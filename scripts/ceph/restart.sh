#!/usr/bin/env bash
# usage: scripts/ceph/restart.sh STATEDIR NAME...
#
# Starts again daemons that scripts/ceph/up.sh STATEDIR started and that
# have since stopped or been killed (a site that lost power comes back):
# each NAME (east-mon, east-osd, east-mgr, east-rbd-mirror, east-cephcsi,
# the same for west) runs its command of STATEDIR/cmds/NAME as up.sh ran
# it, niced, in a session of its own, its output appended to the same
# file, its new PID in STATEDIR/pids/NAME.pid. A NAME whose recorded
# process still runs is refused: stop it first. A ceph-csi's sockets, left
# behind by a killed one, are removed before it starts, and restart.sh
# waits until it serves them again (30 s at most).
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 STATEDIR NAME..." >&2
	exit 2
fi
S=$(cd "$1" && pwd)
shift

die() {
	echo "restart.sh: $*" >&2
	exit 1
}

# alive PID: the recorded process still runs, and is ours.
alive() {
	[ -r "/proc/$1/cmdline" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null &&
		tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$S"
}

for name in "$@"; do
	[ -f "$S/cmds/$name" ] || die "$name: no command recorded in $S/cmds (was it started by up.sh?)"
	p=$(cat "$S/pids/$name.pid" 2>/dev/null || true)
	if [ -n "$p" ] && alive "$p"; then
		die "$name still runs as PID $p"
	fi
done

for name in "$@"; do
	nicelevel='' out='' cmd=()
	# shellcheck disable=SC1090 # written by up.sh's start
	. "$S/cmds/$name"
	case $name in
	*-cephcsi)
		site=${name%-cephcsi}
		rm -f "$S/csi/$site/csi.sock" "$S/csi/$site/csi-addons.sock"
		;;
	esac
	rm -f "$S/pids/$name.pid"
	(
		echo "$BASHPID" >"$S/pids/$name.pid.new"
		mv "$S/pids/$name.pid.new" "$S/pids/$name.pid"
		exec setsid nice -n "$nicelevel" "${cmd[@]}" </dev/null >>"$out" 2>&1
	) &
	echo "restart.sh: $name started ($!)"
done

for name in "$@"; do
	case $name in
	*-cephcsi)
		site=${name%-cephcsi}
		deadline=$((SECONDS + 30))
		until [ -s "$S/pids/$name.pid" ]; do sleep 0.05; done
		until [ -S "$S/csi/$site/csi.sock" ] && [ -S "$S/csi/$site/csi-addons.sock" ]; do
			alive "$(cat "$S/pids/$name.pid")" || die "$name exited; see its output"
			[ "$SECONDS" -lt "$deadline" ] || die "$name: its sockets did not appear in 30 s"
			sleep 0.1
		done
		;;
	esac
done
