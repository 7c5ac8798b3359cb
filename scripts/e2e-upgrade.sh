#!/usr/bin/env bash
# usage: scripts/e2e-upgrade.sh   (make e2e-upgrade)
#
# An upgrade and a rollback of the worker while a failover waits at an
# approval gate (e2e TestUpgrade): builds the worker and drctl of an
# earlier commit of this repository, E2E_UPGRADE_FROM (the Makefile names
# it), from that commit's files alone (git archive), and runs the test,
# which upgrades from that build to this checkout's, rolls back to it
# and forward again (README, "Upgrading"). The build
# is kept in .run/upgrade/COMMIT/ for the next run. The test's log goes
# to .run/e2e-upgrade.log.
#
# It needs the commit in the clone's history: a shallow clone says so
# and exits 1 (git fetch --unshallow).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
from=${E2E_UPGRADE_FROM:?E2E_UPGRADE_FROM names the commit to upgrade from}
GO=${GO:-go}

if ! rev=$(git rev-parse --verify --quiet "$from^{commit}"); then
	echo "e2e-upgrade: commit $from is not in this clone's history (a shallow clone? git fetch --unshallow)" >&2
	exit 1
fi
if [ "$rev" = "$(git rev-parse HEAD)" ]; then
	echo "e2e-upgrade: HEAD is $rev, the commit to upgrade from: set E2E_UPGRADE_FROM to an earlier one" >&2
	exit 1
fi
prev=$root/.run/upgrade/$rev
if [ ! -x "$prev/worker" ] || [ ! -x "$prev/drctl" ]; then
	echo "e2e-upgrade: building the worker and drctl of ${rev:0:12} into $prev"
	src=$(mktemp -d)
	trap 'rm -rf "$src"' EXIT
	git archive --format=tar "$rev" | tar -x -C "$src"
	mkdir -p "$prev.tmp"
	# -buildvcs=false: the tree has no .git; the revision goes in as
	# make build puts it.
	(cd "$src" && $GO build -buildvcs=false -trimpath \
		-ldflags "-X github.com/drover-dr/drover/internal/version.Revision=${rev:0:12}" \
		-o "$prev.tmp/" ./cmd/worker ./cmd/drctl)
	rm -rf "$prev" && mv "$prev.tmp" "$prev"
fi

mkdir -p .run
set -o pipefail
DROVER_E2E_UPGRADE_FROM=$prev DROVER_E2E_UPGRADE_REV=$rev \
	$GO test -count=1 -timeout 15m -v -run '^TestUpgrade$' ./e2e 2>&1 | tee .run/e2e-upgrade.log \
	| grep --line-buffered -E '^(=== RUN|--- |ok|FAIL|PASS)|^ +--- |upgrade:' \
	|| { echo "== the end of .run/e2e-upgrade.log"; tail -n 150 .run/e2e-upgrade.log; exit 1; }
