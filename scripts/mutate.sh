#!/usr/bin/env bash
# Mutation testing of the safety-critical code with gremlins: each target
# is one package and the files of it that are mutated; the package's own
# tests must kill the mutants. Prints each target's counts and the kill
# rate per package; the JSON reports go to .run/mutate/.
#
# Environment:
#   GREMLINS        the gremlins binary (default bin/gremlins)
#   MUTATE_WORKERS  mutants tested at once (default 1: the tests are heavy)
#   MUTATE_TIMEOUT  timeout coefficient over the package's test time (default:
#                   each target's own, below)
#   MUTATE_ONLY     run only the targets whose name matches this regexp
#   MUTATE_DRY      set to 1 to list the mutants without testing them
#   MUTATE_FILES    mutate only these files of the (one) target chosen, e.g.
#                   to split workflows over two runs; the reports are then
#                   named after the target and MUTATE_PART
#   MUTATE_PART     a suffix for the report names of such a part
set -euo pipefail
cd "$(dirname "$0")/.."
GREMLINS=${GREMLINS:-bin/gremlins}
GREMLINS=$(cd "$(dirname "$GREMLINS")" && pwd)/$(basename "$GREMLINS")
WORKERS=${MUTATE_WORKERS:-1}
ONLY=${MUTATE_ONLY:-.}
dry=()
[[ ${MUTATE_DRY:-} == 1 ]] && dry=(--dry-run)
OUT=$PWD/.run/mutate
mkdir -p "$OUT"

# target name | package dir | files mutated (space separated) | timeout
# coefficient | tests skipped
#
# The timeout is the coefficient times the package's coverage run (build
# included, -count=1 so that it is never a cached result): generous for the
# small packages, whose run is mostly the build, tighter for workflows. The
# skipped tests are the slow ones that guard nothing in the mutated
# files (a dev-server round trip, history size at scale, YAML alias bombs)
# or run a Nomad agent; -short skips the 5,000-group run.
targets=(
  "plans|plans|validate.go|6|^TestAliasExpansionIsBounded$"
  "classify|activities|classify.go|4|"
  "sim|sim|check.go fence.go datapath.go|4|"
  "workflows|workflows|*|2|^(TestActionsOnDevServer|TestInputSizeLine|TestFailoverStartsNomadJobsByPriority|TestFailoverPausesOnUnhealthyWorkload|TestFailbackStopsBeforeDemoting)$"
)

summary=()
for t in "${targets[@]}"; do
  IFS='|' read -r name dir files coef skip <<<"$t"
  [[ $name =~ $ONLY ]] || continue
  files=${MUTATE_FILES:-$files}
  name=$name${MUTATE_PART:+-$MUTATE_PART}
  # Exclude every non-test file of the package that is not mutated.
  excl=()
  if [[ $files != "*" ]]; then
    for f in "$dir"/*.go; do
      b=$(basename "$f")
      [[ $b == *_test.go ]] && continue
      [[ " $files " == *" $b "* ]] && continue
      excl+=(-E "^${b//./\\.}\$")
    done
  fi
  flags="${GOFLAGS:-} -count=1 -short"
  [[ -n $skip ]] && flags="$flags -skip=$skip"
  echo "== $name: $dir/{${files// /,}}"
  (GOFLAGS="$flags" "$GREMLINS" unleash "./$dir" --workers "$WORKERS" \
    --timeout-coefficient "${MUTATE_TIMEOUT:-$coef}" -o "$OUT/$name.json" "${dry[@]}" "${excl[@]}") | tee "$OUT/$name.log"
  summary+=("$name")
done

echo
echo "== kill rate (killed / killed + lived; timed out counts as killed; not covered and not viable apart)"
for name in "${summary[@]}"; do
  # From the log, so that the figures of a run cut short are still there.
  python3 - "$OUT/$name.log" "$name" <<'PY'
import collections, re, sys
path, name = sys.argv[1:3]
c = collections.Counter()
seen = set()
for line in open(path):
    m = re.match(r"^\s*(KILLED|LIVED|TIMED OUT|NOT COVERED|NOT VIABLE|SKIPPED)\s+(\S+) at (\S+)\s*$", line)
    if m and (m[2], m[3]) not in seen:
        seen.add((m[2], m[3]))
        c[m[1]] += 1
killed = c["KILLED"] + c["TIMED OUT"]
lived = c["LIVED"]
rate = 100.0 * killed / (killed + lived) if killed + lived else 0.0
print(f"{name:12s} {rate:5.1f}%  killed {c['KILLED']}, timed out {c['TIMED OUT']}, lived {lived}, "
      f"not covered {c['NOT COVERED']}, not viable {c['NOT VIABLE']}")
PY
done
