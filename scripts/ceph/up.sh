#!/usr/bin/env bash
# usage: scripts/ceph/up.sh STATEDIR
#
# Brings up real Ceph (Pacific, from Debian's packages) and real ceph-csi for
# the two sites east and west, all on 127.0.0.1, without systemd or Docker:
#   - one cluster per site: one mon, one mgr, one OSD on BlueStore over a
#     sparse file (it survives a SIGKILL and a restart, as a site that lost
#     power must; a memstore OSD loses its data), pool `rbd`, cephx on; the
#     pool has the same ID on both clusters;
#   - two-way snapshot-based RBD mirroring of pool `rbd` (one rbd-mirror per
#     cluster);
#   - a client.drover-csi user with ceph-csi's caps and the same key on both
#     clusters, and app users client.east-app / client.west-app (same keys on
#     both clusters);
#   - STATEDIR/lib/bindaddr.so, built from bindaddr.c beside this script: run
#     a site's application clients with LD_PRELOAD=<it> and
#     DROVER_CLIENT_ADDR=127.0.2.1 (east) or 127.0.3.1 (west) and Ceph sees
#     them at that address, so blocklisting a site's CIDR (127.0.2.0/24,
#     127.0.3.0/24) fences that site's application clients and nothing else.
#     (librados ignores `public addr` / `ms bind before connect` for clients.)
#   - one ceph-csi RBD controller per site, in its own mount namespace (its
#     /etc/ceph and /etc/ceph-csi-config are per site), serving CSI and
#     CSI-Addons on unix sockets under STATEDIR.
# Every daemon runs in the foreground of its own session, niced, with its PID
# in STATEDIR/pids/NAME.pid and its command in STATEDIR/cmds/NAME;
# scripts/ceph/down.sh STATEDIR stops them all, and scripts/ceph/restart.sh
# STATEDIR NAME... starts stopped or killed ones again as they were. A
# failed bring-up calls down.sh itself. STATEDIR/env describes the result as
# KEY=value lines (see the end of this file).
#
# Environment:
#   DROVER_CEPH_PORT_BASE  default 29000: east mon BASE+10 (v2) and BASE+11
#                          (v1), east daemons BASE+100..BASE+199; west mon
#                          BASE+20/BASE+21, west daemons BASE+300..BASE+399
#   DROVER_CEPHCSI         the cephcsi binary (required)
#   DROVER_CEPH_NICE       nice increment of the daemons (default 10)
#   DROVER_CEPHCSI_V       ceph-csi log verbosity (default 5)
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 STATEDIR" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
S=$(cd "$1" && pwd)

base=${DROVER_CEPH_PORT_BASE:-29000}
cephcsi=${DROVER_CEPHCSI:?set DROVER_CEPHCSI to the cephcsi binary}
nicelevel=${DROVER_CEPH_NICE:-10}
csiv=${DROVER_CEPHCSI_V:-5}
clusterid=ceph
pool=rbd
sites=(east west)
declare -A monv2 monv1 bindmin bindmax appaddr fencecidr
monv2[east]=$((base + 10)) monv1[east]=$((base + 11))
bindmin[east]=$((base + 100)) bindmax[east]=$((base + 199))
monv2[west]=$((base + 20)) monv1[west]=$((base + 21))
bindmin[west]=$((base + 300)) bindmax[west]=$((base + 399))
appaddr[east]=127.0.2.1 fencecidr[east]=127.0.2.0/24
appaddr[west]=127.0.3.1 fencecidr[west]=127.0.3.0/24

t0=${EPOCHREALTIME/./}
tlap=$t0
lap() {
	local now=${EPOCHREALTIME/./}
	printf 'up.sh: %-40s %6.1fs  (total %6.1fs)\n' "$1" \
		"$(((now - tlap) / 1000))e-3" "$(((now - t0) / 1000))e-3"
	tlap=$now
}

die() {
	echo "up.sh: $*" >&2
	exit 1
}

# --- preflight -------------------------------------------------------------
for b in ceph ceph-mon ceph-mgr ceph-osd ceph-authtool monmaptool rbd rbd-mirror uuidgen unshare setsid ss cc; do
	command -v "$b" >/dev/null || die "$b not found (apt-get install ceph-mon ceph-osd ceph-mgr rbd-mirror ceph-common uuid-runtime)"
done
[ -x "$cephcsi" ] || die "cephcsi binary $cephcsi not found (set DROVER_CEPHCSI)"
[ "$(id -u)" -eq 0 ] || die "must run as root (mount namespaces for ceph-csi)"
if compgen -G "$S/pids/*.pid" >/dev/null; then
	for f in "$S"/pids/*.pid; do
		p=$(cat "$f" 2>/dev/null || true)
		if [ -n "$p" ] && kill -0 "$p" 2>/dev/null && grep -qF "$S" "/proc/$p/cmdline" 2>/dev/null; then
			die "$S is in use ($(basename "$f" .pid) runs as PID $p): run scripts/ceph/down.sh $S first"
		fi
	done
fi
for s in "${sites[@]}"; do
	for p in "${monv2[$s]}" "${monv1[$s]}"; do
		if ss -Hltn "sport = :$p" | grep -q .; then
			die "port $p is already in use"
		fi
	done
done

# From here on, a failure stops everything that was started.
bgjobs=()
on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if [ "$rc" -ne 0 ]; then
		echo "up.sh: failed (exit $rc); stopping what was started" >&2
		# Only the cluster builders: the daemons are children too.
		if [ "${#bgjobs[@]}" -gt 0 ]; then
			kill "${bgjobs[@]}" 2>/dev/null || true
			wait "${bgjobs[@]}" 2>/dev/null || true
			# A daemon they were starting has its PID file already; let
			# it get as far as exec, where down.sh recognises it.
			sleep 0.5
		fi
		"$here/down.sh" "$S" >&2 || true
	fi
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rm -rf "${S:?}/east" "${S:?}/west" "${S:?}/pids" "${S:?}/cmds" "${S:?}/env" "${S:?}/csi" "${S:?}/lib"
mkdir -p "$S/pids" "$S/cmds" "$S/csi" "$S/lib"

# start NAME OUTFILE CMD...: runs CMD niced, in a session of its own and in
# the foreground (no daemonizing), stdout and stderr to OUTFILE; its PID is in
# STATEDIR/pids/NAME.pid before it runs, and the command, for restart.sh, in
# STATEDIR/cmds/NAME.
start() {
	local name=$1 out=$2
	shift 2
	{
		printf 'nicelevel=%q\nout=%q\ncmd=(' "$nicelevel" "$out"
		printf '%q ' "$@"
		printf ')\n'
	} >"$S/cmds/$name"
	(
		echo "$BASHPID" >"$S/pids/$name.pid"
		exec setsid nice -n "$nicelevel" "$@" </dev/null >>"$out" 2>&1
	) &
}

# retry SECONDS CMD...: runs CMD every 0.5 s until it succeeds.
retry() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.5
	done
}

conf() { echo "$S/$1/ceph.conf"; }
cph() {
	local site=$1
	shift
	timeout 60 ceph -c "$(conf "$site")" "$@"
}
# q SITE ARGS...: a ceph command for polling, bounded to 10 s.
q() {
	local site=$1
	shift
	timeout 10 ceph -c "$(conf "$site")" "$@"
}
osd_up() { q "$1" osd stat | grep -q '1 up'; }
mgr_available() { q "$1" mgr stat | grep -q '"available": true'; }
mirror_healthy() {
	timeout 10 rbd -c "$(conf "$1")" mirror pool status "$pool" | grep -q 'daemon health: OK'
}
rbdc() {
	local site=$1
	shift
	timeout 60 rbd -c "$(conf "$site")" "$@"
}

# mkcluster SITE: one mon, one OSD (BlueStore over a sparse file), pool rbd,
# one mgr.
mkcluster() {
	local s=$1 d=$S/$1
	local c fsid osduuid
	c=$(conf "$s")
	mkdir -p "$d"/{run,log,mon.a,mgr.x,osd.0}
	fsid=$(uuidgen)
	cat >"$c" <<CONF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:${monv2[$s]},v1:127.0.0.1:${monv1[$s]}]
mon initial members = a
public network = 127.0.0.0/8
public addr = 127.0.0.1
ms bind port min = ${bindmin[$s]}
ms bind port max = ${bindmax[$s]}
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = $d/keyring
run dir = $d/run
admin socket = $d/run/\$name.\$pid.asok
log file = $d/log/\$name.log
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd objectstore = bluestore
bluestore block create = true
bluestore block size = 4294967296
bluestore fsck on mount = false
bluestore fsck on mkfs = false
bluestore cache autotune = false
bluestore cache size = 134217728
osd memory target = 939524096
mgr initial modules =
mon data avail warn = 2
mon data avail crit = 1
[mon.a]
mon data = $d/mon.a
admin socket = $d/run/mon.a.asok
[mgr.x]
mgr data = $d/mgr.x
admin socket = $d/run/mgr.x.asok
[osd.0]
osd data = $d/osd.0
keyring = $d/osd.0/keyring
admin socket = $d/run/osd.0.asok
CONF
	ceph-authtool --create-keyring "$d/keyring" --gen-key -n mon. --cap mon 'allow *'
	ceph-authtool "$d/keyring" --gen-key -n client.admin \
		--cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *'
	ceph-authtool "$d/keyring" --gen-key -n mgr.x \
		--cap mon 'allow profile mgr' --cap osd 'allow *' --cap mds 'allow *'
	monmaptool --create --addv a "[v2:127.0.0.1:${monv2[$s]},v1:127.0.0.1:${monv1[$s]}]" \
		--fsid "$fsid" "$d/monmap"
	ceph-mon -c "$c" --mkfs -i a --monmap "$d/monmap" --keyring "$d/keyring"
	start "$s-mon" "$d/log/mon.out" ceph-mon -c "$c" -i a -f
	retry 60 q "$s" mon stat || die "$s: mon did not answer"

	osduuid=$(uuidgen)
	[ "$(cph "$s" osd new "$osduuid")" = 0 ] || die "$s: osd new did not give id 0"
	cph "$s" auth get-or-create osd.0 mon 'allow profile osd' mgr 'allow profile osd' osd 'allow *' \
		-o "$d/osd.0/keyring"
	ceph-osd -c "$c" -i 0 --mkfs --osd-uuid "$osduuid" >"$d/log/osd-mkfs.out" 2>&1
	start "$s-osd" "$d/log/osd.out" ceph-osd -c "$c" -i 0 -f
	# The pool is made before the mgr starts, so that it is the first pool
	# (ID 1) on both clusters: the mgr's devicehealth module adds a pool of
	# its own.
	cph "$s" osd pool create "$pool" 8 8 >/dev/null
	cph "$s" osd pool application enable "$pool" rbd >/dev/null
	start "$s-mgr" "$d/log/mgr.out" ceph-mgr -c "$c" -i x -f
	retry 60 osd_up "$s" || die "$s: osd.0 did not come up"
	rbdc "$s" pool init "$pool"
	retry 60 mgr_available "$s" || die "$s: mgr not available"
}

# --- stage 0: the client-address shim -------------------------------------
cc -shared -fPIC -O2 -Wall -o "$S/lib/bindaddr.so" "$here/bindaddr.c" -ldl
lap "client-address shim built"

# --- stage 1: the two clusters, in parallel --------------------------------
for s in "${sites[@]}"; do
	mkdir -p "$S/$s/log"
	(mkcluster "$s") >"$S/$s/log/mkcluster.out" 2>&1 &
	bgjobs+=("$!")
done
for j in "${bgjobs[@]}"; do
	if ! wait "$j"; then
		for s in "${sites[@]}"; do
			echo "--- $S/$s/log/mkcluster.out" >&2
			tail -n 15 "$S/$s/log/mkcluster.out" >&2
		done
		die "cluster bring-up failed"
	fi
done
bgjobs=()
poolid=$(cph east osd pool ls detail | awk -v p="'$pool'" '$1 == "pool" && $3 == p { print $2 }')
westpoolid=$(cph west osd pool ls detail | awk -v p="'$pool'" '$1 == "pool" && $3 == p { print $2 }')
if [ -z "$poolid" ] || [ "$poolid" != "$westpoolid" ]; then
	die "pool $pool has ID '$poolid' on east and '$westpoolid' on west; ceph-csi needs them equal"
fi
lap "clusters east+west up (pool id $poolid)"

# --- stage 2: users --------------------------------------------------------
# client.drover-csi: the caps ceph-csi's RBD provisioner needs (blocklist
# for fences). Its name is distinctive: the user ID is one of the secrets
# Drover redacts from every message, and a plain "csi" would be cut out of
# every driver name and path.
cph east auth get-or-create client.drover-csi \
	mon 'profile rbd, allow command "osd blocklist"' mgr 'allow rw' osd 'profile rbd' >/dev/null
cph east auth get-or-create client.east-app mon 'profile rbd' osd 'profile rbd' >/dev/null
cph east auth get-or-create client.west-app mon 'profile rbd' osd 'profile rbd' >/dev/null
for u in drover-csi east-app west-app; do
	cph east auth get "client.$u" -o "$S/client.$u.keyring" 2>/dev/null
	cph west auth import -i "$S/client.$u.keyring" 2>/dev/null
	chmod 600 "$S/client.$u.keyring"
done
for s in "${sites[@]}"; do
	cat "$S/client.east-app.keyring" "$S/client.west-app.keyring" >>"$S/$s/keyring"
done
csikey=$(ceph-authtool -p -n client.drover-csi "$S/client.drover-csi.keyring")
(
	umask 077
	printf '%s' "$csikey" >"$S/client.drover-csi.key"
)
[ "$(cph west auth print-key client.drover-csi)" = "$csikey" ] || die "client.drover-csi key differs on west"
lap "users drover-csi, east-app, west-app"

# --- stage 3: two-way snapshot mirroring -----------------------------------
for s in "${sites[@]}"; do
	rbdc "$s" mirror pool enable "$pool" image --site-name "$s"
done
rbdc east mirror pool peer bootstrap create --site-name east "$pool" >"$S/east/bootstrap-token"
rbdc west mirror pool peer bootstrap import --site-name west --direction rx-tx "$pool" \
	"$S/east/bootstrap-token"
for s in "${sites[@]}"; do
	cph "$s" auth get-or-create client.rbd-mirror.local \
		mon 'profile rbd-mirror' osd 'profile rbd' >>"$S/$s/keyring"
	# rbd-mirror ignores -c when it reconnects: CEPH_CONF too.
	start "$s-rbd-mirror" "$S/$s/log/rbd-mirror.out" \
		env CEPH_CONF="$(conf "$s")" rbd-mirror -c "$(conf "$s")" --id rbd-mirror.local -f
done
for s in "${sites[@]}"; do
	retry 60 mirror_healthy "$s" ||
		die "$s: rbd-mirror not healthy: $(rbdc "$s" mirror pool status "$pool" 2>&1 | tr '\n' ' ')"
done
for s in "${sites[@]}"; do
	[ "$(rbdc "$s" mirror pool info "$pool" --format json | grep -o '"direction":"rx-tx"' | wc -l)" -ge 1 ] ||
		die "$s: no rx-tx peer"
done
lap "mirroring peered, rbd-mirror x2 healthy"

# --- stage 4: ceph-csi controllers -----------------------------------------
# ceph-csi reads /etc/ceph-csi-config/config.json and writes /etc/ceph at fixed
# paths: each site's controller gets its own view of both in a mount namespace
# of its own (gone when the process is). It also needs /tmp/csi/keys.
mkdir -p /etc/ceph-csi-config /etc/ceph /tmp/csi/keys
for s in "${sites[@]}"; do
	d=$S/csi/$s
	mkdir -p "$d/etc-ceph" "$d/config"
	# The v2 port: with the v1 port a messenger banner on stderr made ceph-csi
	# report a successful force promotion as failed.
	printf '[{"clusterID":"%s","monitors":["127.0.0.1:%s"]}]\n' "$clusterid" "${monv2[$s]}" \
		>"$d/config/config.json"
	rm -f "$d/csi.sock" "$d/csi-addons.sock"
	# shellcheck disable=SC2016 # $1.. are expanded by the inner sh
	start "$s-cephcsi" "$S/csi/$s-cephcsi.out" \
		unshare -m --propagation private -- sh -c \
		'mount --bind "$1" /etc/ceph && mount --bind "$2" /etc/ceph-csi-config && shift 2 && exec "$@"' \
		sh "$d/etc-ceph" "$d/config" \
		"$cephcsi" --type=rbd --controllerserver=true --nodeserver=false \
		--drivername=rbd.csi.ceph.com --instanceid=default --nodeid="drover-$s" \
		--endpoint="unix://$d/csi.sock" --csi-addons-endpoint="unix://$d/csi-addons.sock" \
		--v="$csiv"
done
alive() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
deadline=$((SECONDS + 30))
for s in "${sites[@]}"; do
	d=$S/csi/$s
	p=$(cat "$S/pids/$s-cephcsi.pid")
	until [ -S "$d/csi.sock" ] && [ -S "$d/csi-addons.sock" ]; do
		alive "$p" || die "$s: ceph-csi exited; see $S/csi/$s-cephcsi.out"
		[ "$SECONDS" -lt "$deadline" ] ||
			die "$s: ceph-csi sockets did not appear; see $S/csi/$s-cephcsi.out"
		sleep 0.1
	done
done
sleep 0.5
for s in "${sites[@]}"; do
	alive "$(cat "$S/pids/$s-cephcsi.pid")" || die "$s: ceph-csi exited; see $S/csi/$s-cephcsi.out"
done
lap "ceph-csi x2 serving"

# --- result ----------------------------------------------------------------
envtmp=$S/env.tmp
{
	echo "DROVER_CEPH_STATEDIR=$S"
	echo "DROVER_CEPH_CLUSTER_ID=$clusterid"
	echo "DROVER_CEPH_POOL=$pool"
	echo "DROVER_CEPH_POOL_ID=$poolid"
	echo "DROVER_CEPHCSI_BIN=$cephcsi"
	echo "DROVER_CEPH_CSI_USER=drover-csi"
	echo "DROVER_CEPH_CSI_KEY_FILE=$S/client.drover-csi.key"
	echo "DROVER_CEPH_CSI_KEYRING=$S/client.drover-csi.keyring"
	echo "DROVER_CEPH_FENCE_SCHEME=cidr"
	echo "DROVER_CEPH_CLIENT_SHIM=$S/lib/bindaddr.so"
	echo "DROVER_CEPH_CLIENT_ADDR_VAR=DROVER_CLIENT_ADDR"
	for s in "${sites[@]}"; do
		u=${s^^}
		echo "DROVER_CEPH_${u}_CONF=$(conf "$s")"
		echo "DROVER_CEPH_${u}_MON=127.0.0.1:${monv2[$s]}"
		echo "DROVER_CEPH_${u}_CSI_ENDPOINT=unix://$S/csi/$s/csi.sock"
		echo "DROVER_CEPH_${u}_CSIADDONS_ENDPOINT=unix://$S/csi/$s/csi-addons.sock"
		echo "DROVER_CEPH_${u}_APP_ID=$s-app"
		echo "DROVER_CEPH_${u}_APP_ADDR=${appaddr[$s]}"
		echo "DROVER_CEPH_${u}_FENCE_CIDR=${fencecidr[$s]}"
		echo "DROVER_CEPH_${u}_CEPHCSI_LOG=$S/csi/$s-cephcsi.out"
	done
} >"$envtmp"
mv "$envtmp" "$S/env"
lap "done; $S/env written"
