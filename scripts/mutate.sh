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
#   MUTATE_SELECT   0 to run the whole package's tests on every mutant; by
#                   default each file's mutants run only the tests that run
#                   a line of that file (a test that runs none of its lines
#                   cannot tell a mutant of it from the original), found
#                   by a coverage run of each test on its own
set -euo pipefail
cd "$(dirname "$0")/.."
GREMLINS=${GREMLINS:-bin/gremlins}
GREMLINS=$(cd "$(dirname "$GREMLINS")" && pwd)/$(basename "$GREMLINS")
WORKERS=${MUTATE_WORKERS:-1}
ONLY=${MUTATE_ONLY:-.}
dry=()
[[ ${MUTATE_DRY:-} == 1 ]] && dry=(--dry-run)
OUT=$PWD/.run/mutate
# gremlins tests each mutant in a copy of the module without bin/, where the
# dev-server tests would skip (and every mutant that only they kill would
# live): point them at the binary by its absolute path.
if [[ -z ${DROVER_TEMPORAL:-} ]]; then
  if [[ -x bin/temporal ]]; then
    export DROVER_TEMPORAL=$PWD/bin/temporal
  else
    echo "mutate: no bin/temporal (make temporal): the dev-server tests would skip" >&2
    exit 2
  fi
fi
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
  "activities|activities|classify.go poll.go|4|"
  "sim|sim|check.go fence.go datapath.go|4|"
  "workflows|workflows|*|2|^(TestActionsOnDevServer|TestInputSizeLine|TestFailoverStartsNomadJobsByPriority|TestFailoverPausesOnUnhealthyWorkload|TestFailbackStopsBeforeDemoting)$"
)

# exclude DIR FILES sets excl to gremlins' flags that leave out every
# non-test file of DIR but FILES (space separated; "*" leaves out none).
exclude() {
  excl=()
  [[ $2 == "*" ]] && return
  local f b
  for f in "$1"/*.go; do
    b=$(basename "$f")
    [[ $b == *_test.go || " $2 " == *" $b "* ]] && continue
    excl+=(-E "^${b//./\\.}\$")
  done
}

summary=()
for t in "${targets[@]}"; do
  IFS='|' read -r name dir files coef skip <<<"$t"
  [[ $name =~ $ONLY ]] || continue
  files=${MUTATE_FILES:-$files}
  name=$name${MUTATE_PART:+-$MUTATE_PART}
  flags="${GOFLAGS:-} -count=1 -short -failfast"
  [[ -n $skip ]] && flags="$flags -skip=$skip"
  if [[ ${MUTATE_SELECT:-1} == 0 ]]; then
    exclude "$dir" "$files"
    echo "== $name: $dir/{${files// /,}}"
    (GOFLAGS="$flags" "$GREMLINS" unleash "./$dir" --workers "$WORKERS" \
      --timeout-coefficient "${MUTATE_TIMEOUT:-$coef}" -o "$OUT/$name.json" "${dry[@]}" "${excl[@]}") | tee "$OUT/$name.log"
    summary+=("$name")
    continue
  fi
  # Which tests run a line of which file: each test alone, with coverage.
  cov=$OUT/$name.cov
  rm -rf "$cov" && mkdir -p "$cov"
  go test -c -cover -covermode=set -coverpkg="./$dir" -o "$cov/pkg.test" "./$dir"
  (cd "$dir" && "$cov/pkg.test" -test.list '.*') | grep -E '^(Test|Fuzz|Example)' |
    { if [[ -n $skip ]]; then grep -v -E "$skip"; else cat; fi; } >"$cov/tests"
  (cd "$dir" && xargs -P "${MUTATE_COVER_JOBS:-3}" -I{} sh -c \
    '"$0" -test.short -test.count=1 -test.run "^{}\$" -test.coverprofile "$1/{}.out" >"$1/{}.log" 2>&1 || true' \
    "$cov/pkg.test" "$cov" <"$cov/tests")
  if [[ $files == "*" ]]; then
    files=$(cd "$dir" && ls *.go | grep -v '_test\.go$' | tr '\n' ' ')
  fi
  lines=$(python3 - "$cov" $files <<'PY'
import glob, os, sys
cov, files = sys.argv[1], sys.argv[2:]
by = {f: set() for f in files}
for p in glob.glob(os.path.join(cov, "*.out")):
    test = os.path.basename(p)[:-4]
    for line in open(p):
        if line.startswith("mode:"):
            continue
        loc, _, count = line.rsplit(" ", 2)
        f = os.path.basename(loc.split(":")[0])
        if f in by and int(count) > 0:
            by[f].add(test)
for f in files:
    print(f, "|".join(sorted(by[f])))
PY
)
  while read -r file tests; do
    part=$name-${file%.go}
    if [[ -z $tests ]]; then
      echo "== $part: $dir/$file: no test runs a line of it"
      continue
    fi
    exclude "$dir" "$file"
    echo "== $part: $dir/$file, $(tr '|' '\n' <<<"$tests" | wc -l) tests run a line of it"
    (GOFLAGS="$flags -run=^($tests)\$" "$GREMLINS" unleash "./$dir" --workers "$WORKERS" \
      --timeout-coefficient "${MUTATE_TIMEOUT:-$coef}" -o "$OUT/$part.json" "${dry[@]}" "${excl[@]}") | tee "$OUT/$part.log"
    summary+=("$part")
  done <<<"$lines"
done

echo
echo "== kill rate (killed / killed + lived; timed out counts as killed; not covered and not viable apart)"
# From the logs, so that the figures of a run cut short are still there.
python3 - "$OUT" "${summary[@]}" <<'PY'
import collections, re, sys
out, names = sys.argv[1], sys.argv[2:]
def show(name, c):
    killed = c["KILLED"] + c["TIMED OUT"]
    lived = c["LIVED"]
    rate = 100.0 * killed / (killed + lived) if killed + lived else 0.0
    print(f"{name:24s} {rate:5.1f}%  killed {c['KILLED']}, timed out {c['TIMED OUT']}, lived {lived}, "
          f"not covered {c['NOT COVERED']}, not viable {c['NOT VIABLE']}")
per = collections.defaultdict(collections.Counter)
total = collections.Counter()
for name in names:
    c = collections.Counter()
    seen = set()
    for line in open(f"{out}/{name}.log"):
        m = re.match(r"^\s*(KILLED|LIVED|TIMED OUT|NOT COVERED|NOT VIABLE|SKIPPED)\s+(\S+) at (\S+)\s*$", line)
        if m and (m[2], m[3]) not in seen:
            seen.add((m[2], m[3]))
            c[m[1]] += 1
    show(name, c)
    per[name.split("-")[0]].update(c)
    total.update(c)
if len(names) > 1:
    print()
    for pkg, c in per.items():
        show(pkg, c)
    show("all", total)
PY
