#!/usr/bin/env bash
# usage: scripts/ceph/check.sh STATEDIR
#
# Checks what scripts/ceph/up.sh STATEDIR brought up, using only STATEDIR/env
# and the rbd/ceph CLIs:
#   1. each site's ceph-csi controller runs and serves its CSI and CSI-Addons
#      unix sockets;
#   2. snapshot-based mirroring works both ways: an image written on one site
#      (by that site's application client) and mirror-snapshotted has the same
#      content on the other site;
#   3. the CIDR fence means something: on each cluster, blocklisting the other
#      site's client range makes that site's application client fail to write
#      while the local site's client still writes, and removing the range
#      lets it write again.
# It removes the images and blocklist entries it made, also on failure.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 STATEDIR" >&2
	exit 2
fi
S=$(cd "$1" && pwd)
[ -f "$S/env" ] || { echo "check.sh: $S/env missing: run up.sh first" >&2; exit 1; }
# shellcheck source=/dev/null
. "$S/env"

t0=${EPOCHREALTIME/./}
say() { printf 'check.sh: [%5.1fs] %s\n' "$(((${EPOCHREALTIME/./} - t0) / 1000))e-3" "$*"; }
fail() {
	echo "check.sh: FAIL: $*" >&2
	exit 1
}
conf_of() {
	case $1 in
	east) echo "$DROVER_CEPH_EAST_CONF" ;;
	west) echo "$DROVER_CEPH_WEST_CONF" ;;
	esac
}
addr_of() {
	case $1 in
	east) echo "$DROVER_CEPH_EAST_APP_ADDR" ;;
	west) echo "$DROVER_CEPH_WEST_APP_ADDR" ;;
	esac
}
cidr_of() {
	case $1 in
	east) echo "$DROVER_CEPH_EAST_FENCE_CIDR" ;;
	west) echo "$DROVER_CEPH_WEST_FENCE_CIDR" ;;
	esac
}
other() { if [ "$1" = east ]; then echo west; else echo east; fi; }
# adm SITE ceph|rbd ARGS...: an admin command against SITE's cluster.
adm() {
	local c=$1 cmd=$2
	shift 2
	timeout 60 "$cmd" -c "$(conf_of "$c")" "$@"
}
# app CLUSTER CLIENTSITE RBDARGS...: rbd as CLIENTSITE's application client
# (its user and its loopback address) against CLUSTER.
app() {
	local cluster=$1 client=$2
	shift 2
	LD_PRELOAD=$DROVER_CEPH_CLIENT_SHIM DROVER_CLIENT_ADDR=$(addr_of "$client") \
		timeout 40 rbd -c "$(conf_of "$cluster")" --id "$client-app" "$@"
}

images=()
fences=()
blob=
cleanup() {
	local rc=$? i f
	[ -z "$blob" ] || rm -f "$blob"
	for f in "${fences[@]}"; do
		adm "${f%%=*}" ceph osd blocklist range rm "${f#*=}" >/dev/null 2>&1 || true
	done
	for i in "${images[@]}"; do
		adm "${i%%=*}" rbd mirror image disable --force "$DROVER_CEPH_POOL/${i#*=}" >/dev/null 2>&1 || true
		adm "${i%%=*}" rbd rm --no-progress "$DROVER_CEPH_POOL/${i#*=}" >/dev/null 2>&1 || true
	done
	if [ "$rc" -eq 0 ]; then
		echo "check.sh: OK"
	else
		echo "check.sh: failed" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT

# --- 1. ceph-csi -----------------------------------------------------------
for s in east west; do
	u=${s^^}
	csi=DROVER_CEPH_${u}_CSI_ENDPOINT addons=DROVER_CEPH_${u}_CSIADDONS_ENDPOINT
	log=DROVER_CEPH_${u}_CEPHCSI_LOG
	for ep in "${!csi}" "${!addons}"; do
		[ -S "${ep#unix://}" ] || fail "$s: no socket ${ep#unix://}"
	done
	p=$(cat "$S/pids/$s-cephcsi.pid")
	kill -0 "$p" 2>/dev/null || fail "$s: ceph-csi (PID $p) is not running"
	grep -q 'Listening for connections on address' "${!log}" || fail "$s: ceph-csi does not serve CSI"
	grep -q 'listening for CSI-Addons requests' "${!log}" || fail "$s: ceph-csi does not serve CSI-Addons"
	grep -q "\"clusterID\":\"$DROVER_CEPH_CLUSTER_ID\"" "$S/csi/$s/config/config.json" ||
		fail "$s: config.json lacks clusterID $DROVER_CEPH_CLUSTER_ID"
done
say "ceph-csi east and west serve CSI and CSI-Addons ($DROVER_CEPH_EAST_CSIADDONS_ENDPOINT, $DROVER_CEPH_WEST_CSIADDONS_ENDPOINT)"

# --- 2. mirroring both ways ------------------------------------------------
blob=$(mktemp /tmp/ceph-e2e-check.XXXXXX)
head -c 1048576 /dev/urandom >"$blob"
want=$(md5sum <"$blob" | cut -d' ' -f1)
for s in east west; do
	o=$(other "$s")
	img=drover-check-$s-$$
	# The site's application client writes 1 MiB of random data on its own
	# cluster; enabling snapshot mirroring takes the first mirror snapshot.
	app "$s" "$s" import --no-progress --image-feature layering "$blob" "$DROVER_CEPH_POOL/$img" >/dev/null
	images+=("$s=$img")
	adm "$s" rbd mirror image enable "$DROVER_CEPH_POOL/$img" snapshot >/dev/null
	src=$(adm "$s" rbd export --no-progress "$DROVER_CEPH_POOL/$img" - | md5sum | cut -d' ' -f1)
	[ "$src" = "$want" ] || fail "$s: image $img does not hold what was written"
	got=
	for _ in $(seq 120); do
		if adm "$o" rbd info "$DROVER_CEPH_POOL/$img" >/dev/null 2>&1; then
			got=$(adm "$o" rbd export --no-progress "$DROVER_CEPH_POOL/$img" - 2>/dev/null | md5sum | cut -d' ' -f1)
			[ "$got" = "$src" ] && break
		fi
		sleep 0.5
	done
	[ "$got" = "$src" ] || fail "$s -> $o: image $img not mirrored within 60 s"
	adm "$o" rbd info "$DROVER_CEPH_POOL/$img" | grep -q 'mirroring primary: false' ||
		fail "$s -> $o: mirrored image is not non-primary"
	say "mirroring $s -> $o: $img identical on both (md5 $src)"
done

# --- 3. the CIDR fence ----------------------------------------------------
for s in west east; do
	o=$(other "$s")
	img=drover-fence-$s-$$
	adm "$s" rbd create --size 64M --image-feature layering "$DROVER_CEPH_POOL/$img"
	images+=("$s=$img")
	for c in "$o" "$s"; do
		app "$s" "$c" bench --io-type write --io-size 4K --io-total 16K "$DROVER_CEPH_POOL/$img" >/dev/null 2>&1 ||
			fail "$s cluster: $c's client cannot write before the fence"
	done
	cidr=$(cidr_of "$o")
	fences+=("$s=$cidr")
	adm "$s" ceph osd blocklist range add "$cidr" >/dev/null 2>&1
	line=$(adm "$s" ceph osd blocklist ls 2>/dev/null | grep "^cidr:" || true)
	[ -n "$line" ] || fail "$s cluster: no cidr: entry in osd blocklist ls"
	if app "$s" "$o" bench --io-type write --io-size 4K --io-total 16K "$DROVER_CEPH_POOL/$img" >/dev/null 2>&1; then
		fail "$s cluster: $o's client ($(addr_of "$o")) still writes with $cidr blocklisted"
	fi
	app "$s" "$s" bench --io-type write --io-size 4K --io-total 16K "$DROVER_CEPH_POOL/$img" >/dev/null 2>&1 ||
		fail "$s cluster: $s's own client ($(addr_of "$s")) was fenced too"
	adm "$s" ceph osd blocklist range rm "$cidr" >/dev/null 2>&1
	fences=()
	app "$s" "$o" bench --io-type write --io-size 4K --io-total 16K "$DROVER_CEPH_POOL/$img" >/dev/null 2>&1 ||
		fail "$s cluster: $o's client cannot write after the fence is removed"
	say "fence on $s cluster: '$line' stops $o's client ($(addr_of "$o")), not $s's ($(addr_of "$s")); removal restores it"
done
