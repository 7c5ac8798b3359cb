#!/usr/bin/env bash
# usage: scripts/ceph/down.sh STATEDIR
#
# Stops everything scripts/ceph/up.sh STATEDIR started, by the PIDs it
# recorded in STATEDIR/pids: TERM, up to 10 s of grace, then KILL. A PID is
# only signalled while its command line still names STATEDIR (so a PID reused
# by another process is left alone). Safe to run twice, and after a
# half-failed up.sh. ceph-csi's bind mounts live in its own mount namespaces
# and go with it; this checks that none of STATEDIR is mounted afterwards.
# The state itself (logs, cluster data) is left in STATEDIR.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 STATEDIR" >&2
	exit 2
fi
if [ ! -d "$1" ]; then
	echo "down.sh: $1: nothing to stop"
	exit 0
fi
S=$(cd "$1" && pwd)

# ours PID: the process's command line names STATEDIR.
ours() {
	[ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$S"
}
# starttime PID: the process's start time (field 22 of /proc/PID/stat), which
# tells it from a later process that got the same PID.
starttime() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) }
	# shellcheck disable=SC2086 # split on purpose
	set -- $st
	echo "${20}"
}
# running PID START: the process started at START still has a live thread.
# (A daemon whose main thread has exited shows as a zombie while its other
# threads still shut down; it is only gone when the last one is.)
running() {
	local st state threads
	st=$(starttime "$1") || return 1
	[ "$st" = "$2" ] || return 1
	state=$(awk '$1 == "State:" { print $2 }' "/proc/$1/status" 2>/dev/null) || return 1
	threads=$(awk '$1 == "Threads:" { print $2 }' "/proc/$1/status" 2>/dev/null) || return 1
	! { [ "$state" = Z ] && [ "${threads:-1}" -le 1 ]; }
}

declare -A victims=() started=()
stopped=0

# stop_group PIDFILE...: TERM the processes of these PID files that are still
# ours, give them up to 10 s, then KILL what is left.
stop_group() {
	local f p name st
	victims=() started=()
	for f in "$@"; do
		[ -f "$f" ] || continue
		p=$(cat "$f" 2>/dev/null || true)
		name=$(basename "$f" .pid)
		case $p in
		'' | *[!0-9]*)
			rm -f "$f"
			continue
			;;
		esac
		if ours "$p" && st=$(starttime "$p"); then
			victims[$name]=$p
			started[$name]=$st
			kill -TERM "$p" 2>/dev/null || true
			echo "down.sh: TERM $name ($p)"
		else
			rm -f "$f"
		fi
	done
	if ! wait_gone 10; then
		for name in "${!victims[@]}"; do
			p=${victims[$name]}
			if running "$p" "${started[$name]}"; then
				echo "down.sh: KILL $name ($p)"
				kill -KILL "$p" 2>/dev/null || true
			fi
		done
		if ! wait_gone 5; then
			for name in "${!victims[@]}"; do
				if running "${victims[$name]}" "${started[$name]}"; then
					echo "down.sh: $name (${victims[$name]}) is still running" >&2
				fi
			done
			exit 1
		fi
	fi
	for name in "${!victims[@]}"; do
		rm -f "$S/pids/$name.pid"
		stopped=$((stopped + 1))
	done
}

# wait_gone SECONDS: waits until no victim runs; false if one still does.
wait_gone() {
	local deadline=$((SECONDS + $1)) left name
	while :; do
		left=0
		for name in "${!victims[@]}"; do
			if running "${victims[$name]}" "${started[$name]}"; then
				left=1
				break
			fi
		done
		[ "$left" -eq 1 ] || return 0
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# Everything but the monitors first: the OSDs and the mgrs shut down in about
# a second while their monitor answers, and wait 5 s for it when it is gone.
if [ -d "$S/pids" ]; then
	rest=()
	for f in "$S"/pids/*.pid; do
		case $f in
		*-mon.pid) ;;
		*) [ ! -f "$f" ] || rest+=("$f") ;;
		esac
	done
	stop_group "${rest[@]}"
	stop_group "$S"/pids/*-mon.pid
fi

if grep -qF "$S" /proc/mounts; then
	echo "down.sh: still mounted:" >&2
	grep -F "$S" /proc/mounts >&2
	exit 1
fi
rm -f "$S"/csi/*/csi.sock "$S"/csi/*/csi-addons.sock
echo "down.sh: stopped $stopped processes; nothing of $S is running or mounted"
