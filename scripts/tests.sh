#!/usr/bin/env bash
# Every test of the workspace on the default server, as .ci/run runs them:
# unit, integration, JVM interop, CLI and example binaries, then the doc
# tests. What `cargo test --all-targets` and `cargo test --doc` run, with one
# difference: cargo runs one test binary at a time, and most of them wait on
# servers and timers, not on the two cores, so this runs two at a time.
#
# The two fault suites (the bounded failover and routine-operations runs)
# run first, one after the other and with nothing beside them: they judge
# timing (a renewal that misses its lease is a false lost signal), and a
# loaded machine is not what they measure.
#
#   bash scripts/tests.sh            build, run, print each binary's outcome
#   TEST_JOBS=1 bash scripts/tests.sh   one binary at a time
#
# A failed binary's whole output is printed after the others finish; every
# log is kept in target/tests/<binary>.log.
set -euo pipefail
cd "$(dirname "$0")/.."

features=redisson-lock/redisson-config,redisson-lock/metrics,redisson-lock/blocking
out=target/tests
mkdir -p "$out"
rm -f "$out"/*.log "$out"/outcomes.tsv
jobs=${TEST_JOBS:-2}
# Run alone, in this order.
alone=(failover routine)
# The slowest of the rest (about a minute down to 20 s), started first so the
# two lanes end together.
slow_first=(garbage cluster sentinel interop acl interop_cluster cli)

echo "tests: building the test binaries"
cargo test --locked --all-targets --features "$features" --no-run \
  --message-format=json-render-diagnostics 2>"$out/build.log" | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        kind = m["target"]["kind"][0]
        print(m["target"]["name"] + "\t" + kind + "\t" + m["executable"] + "\t" + os.path.dirname(m["manifest_path"]))
' > "$out/binaries.tsv" || { cat "$out/build.log" >&2; exit 1; }

# Runs one binary where cargo would (its package's directory); records
# "name outcome seconds".
run_one() {
  local name=$1 kind=$2 exe=$3 dir=$4 out=$5
  local log="$out/$kind-$name.log" started=$SECONDS outcome=passed
  (cd "$dir" && "$exe") >"$log" 2>&1 || outcome=failed
  local summary
  summary=$(grep -E "^test result:" "$log" | tail -1 | sed 's/^test result: //; s/; finished in.*//')
  printf 'tests: %-6s %-24s %s in %ss (%s)\n' "$kind" "$name" "$outcome" "$((SECONDS - started))" "$summary"
  printf '%s\t%s\t%s\n' "$kind-$name" "$outcome" "$((SECONDS - started))" >>"$out/outcomes.tsv"
}
export -f run_one

ordered() {
  local name
  for name in "$@"; do awk -F'\t' -v n="$name" '$1 == n && $2 == "test"' "$out/binaries.tsv"; done
}
is_listed() { local x=$1; shift; local y; for y in "$@"; do [ "$x" = "$y" ] && return 0; done; return 1; }

started=$SECONDS
ordered "${alone[@]}" | while IFS=$'\t' read -r name kind exe dir; do
  run_one "$name" "$kind" "$exe" "$dir" "$out"
done
{
  ordered "${slow_first[@]}"
  while IFS=$'\t' read -r name kind exe dir; do
    if [ "$kind" = test ] && { is_listed "$name" "${alone[@]}" || is_listed "$name" "${slow_first[@]}"; }; then
      continue
    fi
    printf '%s\t%s\t%s\t%s\n' "$name" "$kind" "$exe" "$dir"
  done < "$out/binaries.tsv"
} | tr '\t' '\n' | xargs -d '\n' -n 4 -P "$jobs" bash -c 'run_one "$0" "$1" "$2" "$3" "'"$out"'"'

binaries=$(wc -l < "$out/binaries.tsv")
ran=$(wc -l < "$out/outcomes.tsv")
failed=$(awk -F'\t' '$2 == "failed" {print $1}' "$out/outcomes.tsv")
echo "tests: $ran of $binaries binaries ran in $((SECONDS - started))s"
for f in $failed; do
  echo
  echo "== tests: $f failed; its whole output ($out/$f.log):"
  cat "$out/$f.log"
done
if [ -n "$failed" ] || [ "$ran" != "$binaries" ]; then
  echo "tests: failed: ${failed:-a binary did not run}" >&2
  exit 1
fi

echo "tests: doc tests"
# The workspace's features, as above (the library's doc tests only): with
# `-p redisson-lock` alone, tokio and fred would be built again with the
# library's narrower feature set (40 s on two cores).
cargo test --locked --doc --features "$features"
