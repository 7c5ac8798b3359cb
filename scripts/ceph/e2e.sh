#!/usr/bin/env bash
# usage: scripts/ceph/e2e.sh   (make e2e-ceph)
#
# The whole DR cycle on two real Ceph clusters through the real ceph-csi:
# installs Ceph from Debian's packages when it is missing, brings up the
# clusters and one ceph-csi controller per site (up.sh), runs the e2e tests
# TestRealCephPowerLoss (a half-dead replica, then the primary site lost to
# a power cut and restarted), TestRealCephHungDriver (ceph-csi with a Ceph
# user its clusters lack) and TestRealCeph (the whole cycle with a frozen
# site, then the point-in-time story), each on clusters of its own, and
# stops every daemon it started (down.sh), also on failure and Ctrl-C.
#
# ceph-csi comes from the environment, as no package holds it:
#   CEPH_CSI       a cephcsi binary, or
#   CEPH_CSI_SRC   a ceph-csi source tree (its vendor/ complete), built here
#                  into .run/ceph/cephcsi with cgo against Debian's librbd.
# Without either it says that it skipped and why, and exits 0.
#
# Pinned and measured: ceph-csi commit 52fcb7b00c3d586c12c05593b1c73ad2c42b171f
# (2024-10-22, after v3.12) on Ceph 16.2.15. CEPH_CSI_COMMIT and
# CEPH_CSI_VERSION name what the build reports (default: that commit,
# "canary" as ceph-csi's own Makefile says).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

pinned=52fcb7b00c3d586c12c05593b1c73ad2c42b171f
if [ -z "${CEPH_CSI:-}" ] && [ -z "${CEPH_CSI_SRC:-}" ]; then
	echo "e2e-ceph: skipped: no ceph-csi (set CEPH_CSI to a cephcsi binary or CEPH_CSI_SRC to a ceph-csi source tree, commit ${pinned:0:7}); no package holds it and this machine cannot fetch it"
	exit 0
fi

t0=$(date +%s)
lap() { echo "e2e-ceph: $1 ($(($(date +%s) - t0)) s)"; }

pkgs=(ceph-mon ceph-osd ceph-mgr rbd-mirror ceph-common uuid-runtime python3-rbd)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ -n "${CEPH_CSI_SRC:-}" ]; then
	for p in librbd-dev librados-dev libcephfs-dev; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
fi
if [ ${#missing[@]} -gt 0 ]; then
	echo "e2e-ceph: installing ${missing[*]} from Debian's packages"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	lap "packages installed"
fi

bin=${CEPH_CSI:-}
if [ -z "$bin" ]; then
	mkdir -p .run/ceph
	bin=$root/.run/ceph/cephcsi
	commit=${CEPH_CSI_COMMIT:-$pinned}
	if [ -d "$CEPH_CSI_SRC/.git" ]; then
		commit=$(git -C "$CEPH_CSI_SRC" rev-parse HEAD)
		[ "$commit" = "$pinned" ] || echo "e2e-ceph: warning: $CEPH_CSI_SRC is at $commit, not the pinned ${pinned:0:7}"
	fi
	echo "e2e-ceph: building ceph-csi from $CEPH_CSI_SRC (several minutes the first time)"
	# ceph-csi refuses to start without the version its Makefile sets.
	(cd "$CEPH_CSI_SRC" && CGO_ENABLED=1 go build -mod=vendor -tags=squid,ceph_preview \
		-ldflags "-X github.com/ceph/ceph-csi/internal/util.GitCommit=$commit -X github.com/ceph/ceph-csi/internal/util.DriverVersion=${CEPH_CSI_VERSION:-canary}" \
		-o "$bin" ./cmd/)
	lap "ceph-csi built"
fi
[ -x "$bin" ] || { echo "e2e-ceph: $bin is not an executable" >&2; exit 1; }

# Each test runs on clusters of its own, brought up for it and stopped
# after it: what one test leaves (a power loss's images, a split brain)
# is not the next one's. DROVER_CEPH_RUN picks the tests (a regular
# expression of go test -run, matched here against each name; make
# bench-ceph: the bench), DROVER_CEPH_LOG the log, .run/NAME.log.
tests=(TestRealCephPowerLoss TestRealCephHungDriver TestRealCeph TestRealCephBench)
run="${DROVER_CEPH_RUN:-^TestRealCeph(PowerLoss|HungDriver)?\$}"
log=.run/${DROVER_CEPH_LOG:-e2e-ceph}.log
mkdir -p .run
: >"$log"
state=
cleanup() {
	status=$?
	trap - EXIT INT TERM
	if [ -n "$state" ]; then
		scripts/ceph/down.sh "$state" || true
		if [ $status -ne 0 ]; then
			echo "e2e-ceph: failed; the clusters' logs are in $state"
		else
			rm -rf "$state"
		fi
	fi
	exit $status
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

set -o pipefail
ran=0
failed=()
for name in "${tests[@]}"; do
	[[ $name =~ $run ]] || continue
	ran=$((ran + 1))
	state=$(mktemp -d /tmp/drover-ceph-XXXXXX)
	DROVER_CEPHCSI=$bin scripts/ceph/up.sh "$state"
	lap "clusters up for $name"
	# A failed test does not stop the others; its clusters' logs stay.
	if DROVER_CEPH_ENV=$state/env go test -count=1 -timeout "${DROVER_CEPH_TIMEOUT:-45m}" -v -run "^$name\$" ./e2e 2>&1 | tee -a "$log" |
		grep --line-buffered -E '^(=== RUN|--- |ok|FAIL|PASS)|^ +--- |ceph: |ceph-bench: '; then
		scripts/ceph/down.sh "$state" >/dev/null
		rm -rf "$state"
	else
		failed+=("$name")
		scripts/ceph/down.sh "$state" >/dev/null
		echo "e2e-ceph: $name failed; its clusters' logs are in $state"
	fi
	state=
	lap "$name done"
done
if [ "$ran" -eq 0 ]; then
	echo "e2e-ceph: no test matches $run" >&2
	exit 2
fi
if [ ${#failed[@]} -gt 0 ]; then
	echo "e2e-ceph: failed: ${failed[*]} (log: $log)"
	exit 1
fi
lap "done"
