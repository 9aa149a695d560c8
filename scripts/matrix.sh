#!/usr/bin/env bash
# The server matrix: the core of the test suite against every server users
# run (Redis 6, 7, 8 and Valkey 8.0, 8.1), a cluster and a Sentinel scenario
# where they differ, and the compatibility table the docs show, generated
# from what ran.
#
#   bash scripts/matrix.sh               build or reuse the servers, run the matrix,
#                                        write target/matrix/{results.tsv,compat.md}
#   bash scripts/matrix.sh --check-docs  ... and fail if the docs' table differs
#   bash scripts/matrix.sh --write-docs  ... and put the table into the docs
#   bash scripts/matrix.sh redis-8 ...   only these servers' rows
#
# The tests find a server through REDIS_SERVER (the binary) and check its
# version against REDIS_SERVER_VERSION (tests/common); the binaries come from
# scripts/servers.sh's registry. The default server (Debian bookworm's
# redis-server) runs the whole suite in .ci/run's `cargo test`, so its row
# here says so instead of running the core again.
set -euo pipefail
cd "$(dirname "$0")/.."

docs_mode=""
only=()
for arg in "$@"; do
  case "$arg" in
    --check-docs) docs_mode=check ;;
    --write-docs) docs_mode=write ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "matrix: unknown option $arg" >&2; exit 2 ;;
    *) only+=("$arg") ;;
  esac
done

out=target/matrix
mkdir -p "$out"
registry=$(bash scripts/servers.sh --registry "${only[@]}")
features=redisson-lock/redisson-config,redisson-lock/metrics,redisson-lock/blocking

# What each row runs: test binaries of the workspace, by name.
# Single server: every object family with its Redis layout, live against
# the JVM (lock, read-write, fair, fenced, spin, multi, semaphores, latch),
# and the CLI.
single=(lock_state read_write fair fenced_spin multi_run semaphore count_down_latch interop interop_sync audit)
cli=(cli ops audit_cli)
# A cluster (3 primaries with a replica each): sharded pub/sub where the
# server has it, classic on Redis 6; JVM and Rust wake each other either way.
cluster=(cluster interop_cluster audit_cluster)
# Redis 6 lacks what five cluster tests use to look at the server, not the
# client: INFO errorstats (6.2), CLUSTER ADDSLOTSRANGE (7.0), sharded
# channels that follow their slot (7.0), sharded subscribers of semaphores
# and of an idle waiter.
cluster_redis6_skip=(--skip an_acquire_refused_with_moved --skip a_cluster_behind_one_address
                     --skip waiters_follow_their_shard_subscription --skip semaphores_and_latches_wake
                     --skip a_subscribed_waiter_reads_no_slot_map)
# Sentinel: 1 primary, 2 replicas, 3 sentinels of the same server.
sentinel=(sentinel audit_sentinel)
# The JVM peers of these rows run the newest Redisson only: what differs
# from one server to the next is the server, and the default server's run
# (scripts/tests.sh) already plays every Redisson version against it.
peers=${INTEROP_REDISSON:-4.7.0}
# Servers run side by side, this many at a time (the tests mostly wait on
# timers and servers, not on the two cores).
jobs=${MATRIX_JOBS:-2}

default_id=redis-7
results=$out/results.tsv

# Builds every test binary once; then rows run them directly, several
# servers at once (cargo would hold its build lock for each run).
echo "matrix: building the test binaries"
cargo test --locked --features "$features" -p redisson-lock -p redisson-lock-cli --tests --no-run \
  --message-format=json 2>"$out/build.log" | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["target"]["name"] + "\t" + m["executable"] + "\t" + os.path.dirname(m["manifest_path"]))
' > "$out/binaries.tsv" || { cat "$out/build.log" >&2; exit 1; }
binary_of() { awk -F'\t' -v n="$1" '$1 == n {print $2}' "$out/binaries.tsv"; }
# Where cargo would run it: its package's directory.
package_of() { awk -F'\t' -v n="$1" '$1 == n {print $3}' "$out/binaries.tsv"; }

# Runs one scenario (test binaries, then libtest arguments after `--`);
# records "id version scenario outcome seconds" in the server's own file.
run() {
  local id=$1 version=$2 binary=$3 scenario=$4; shift 4
  local tests=() args=() seen_dash=0
  for a in "$@"; do
    if [ "$a" = -- ]; then seen_dash=1; elif ((seen_dash)); then args+=("$a"); else tests+=("$a"); fi
  done
  local started=$SECONDS log="$out/$id-$scenario.log" outcome=passed
  : > "$log"
  for t in "${tests[@]}"; do
    local exe; exe=$(binary_of "$t")
    [ -n "$exe" ] || { echo "matrix: no test binary $t" >>"$log"; outcome=failed; break; }
    echo "== $t" >>"$log"
    if ! (cd "$(package_of "$t")" && REDIS_SERVER=$binary REDIS_SERVER_VERSION=$version INTEROP_REDISSON=$peers "$exe" "${args[@]}") >>"$log" 2>&1; then
      outcome=failed
    fi
  done
  local took=$((SECONDS - started))
  printf 'matrix: %-10s %-8s %-9s %s in %ss\n' "$id" "$version" "$scenario" "$outcome" "$took"
  printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$version" "$scenario" "$outcome" "$took" >> "$out/$id.results"
  if [ "$outcome" = failed ]; then
    grep -E "^(test .* FAILED|---- |thread .* panicked)" "$log" | head -20 >&2 || true
    echo "matrix: the whole log is $log" >&2
  fi
}

# One server's rows, one after the other.
rows() {
  local id=$1 version=$2 binary=$3
  : > "$out/$id.results"
  if [ "$id" = "$default_id" ]; then
    for scenario in single cluster sentinel; do
      printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$version" "$scenario" "whole suite" - >> "$out/$id.results"
    done
    return
  fi
  run "$id" "$version" "$binary" single "${single[@]}"
  run "$id" "$version" "$binary" cli "${cli[@]}"
  case "$id" in
    # The newest of each line, and Redis 6 (no sharded pub/sub).
    redis-8|valkey-8.1) run "$id" "$version" "$binary" cluster "${cluster[@]}" ;;
    redis-6) run "$id" "$version" "$binary" cluster "${cluster[@]}" -- "${cluster_redis6_skip[@]}" ;;
  esac
  case "$id" in
    valkey-8.0|valkey-8.1) run "$id" "$version" "$binary" sentinel "${sentinel[@]}" ;;
  esac
  # The deployment audit on every server in every topology: where the rows
  # above have no cluster or Sentinel scenario, its tests of that topology
  # (a row of its own, not a column of the table: only the audit runs).
  case "$id" in
    valkey-8.0) run "$id" "$version" "$binary" audit audit_cluster ;;
    redis-6|redis-8) run "$id" "$version" "$binary" audit audit_sentinel ;;
  esac
}

# The servers with the most rows first, so the two lanes end together
# (valkey-8.1 and redis-8 take about four minutes each, valkey-8.0 and
# redis-6 about three).
longest_first=(valkey-8.1 redis-8 valkey-8.0 redis-6)
ordered_registry=$(
  for id in "${longest_first[@]}"; do awk -F'\t' -v id="$id" '$1 == id' <<< "$registry"; done
  awk -F'\t' 'BEGIN { split("'"${longest_first[*]}"'", l, " "); for (i in l) known[l[i]] = 1 } !($1 in known)' <<< "$registry"
)
ids=()
while IFS=$'\t' read -r id version binary; do
  [ -n "$id" ] || continue
  ids+=("$id")
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  rows "$id" "$version" "$binary" &
done <<< "$ordered_registry"
wait
# The registry's order (the docs' table follows it).
ids=()
while IFS=$'\t' read -r id _; do [ -n "$id" ] && ids+=("$id"); done <<< "$registry"
for id in "${ids[@]}"; do cat "$out/$id.results"; done > "$results"

# The table the docs show: one row per server, one column per topology.
python3 - "$results" "$registry" > "$out/compat.md" <<'PY'
import sys
results = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
servers = [l.split("\t") for l in sys.argv[2].splitlines() if l.strip()]
how = {
    "redis-6": "Debian bullseye source package, built with make",
    "redis-7": "Debian bookworm package `redis-server`",
    "redis-8": "Debian trixie source package, built with make",
    "valkey-8.0": "Debian bookworm-backports package `valkey-server`",
    "valkey-8.1": "Debian trixie source package, built with make",
}
def cell(id, scenario):
    for r in results:
        if r[0] == id and r[2] == scenario:
            return {"passed": "tested", "failed": "FAILED", "whole suite": "tested, whole suite"}[r[3]]
    return "not in the matrix"
print("| server | version | obtained from | single server + JVM + CLI | cluster | Sentinel |")
print("|---|---|---|---|---|---|")
for id, version, _ in servers:
    name = ("Redis " if id.startswith("redis") else "Valkey ") + version
    single = cell(id, "single")
    if single == "tested" and cell(id, "cli") != "tested":
        single = "FAILED (CLI)"
    cluster = cell(id, "cluster")
    if cluster.startswith("tested"):
        cluster += (" (classic pub/sub; the 4 tests that inspect Redis 7 features skipped)"
                    if id == "redis-6" else " (sharded pub/sub)")
    print(f"| {name} | {version} | {how.get(id, '?')} | {single} | {cluster} | {cell(id, 'sentinel')} |")
PY
cat "$out/compat.md"

failed=$(awk -F'\t' '$4 == "failed"' "$results" | wc -l)

# The docs carry the table between markers; --check-docs fails when it is
# stale, --write-docs replaces it.
docs=(README.md docs/topologies.md)
if [ -n "$docs_mode" ] && [ "${#only[@]}" -eq 0 ]; then
  for doc in "${docs[@]}"; do
    python3 - "$doc" "$out/compat.md" "$docs_mode" <<'PY'
import sys, re
doc, table, mode = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3]
text = open(doc).read()
pattern = re.compile(r"(<!-- compat:begin[^>]*-->\n)(.*?)(<!-- compat:end -->)", re.S)
m = pattern.search(text)
if not m:
    sys.exit(f"matrix: {doc} has no <!-- compat:begin --> ... <!-- compat:end --> block")
if mode == "write":
    open(doc, "w").write(text[:m.start(2)] + table + text[m.end(2):])
elif m.group(2) != table:
    sys.exit(f"matrix: the compatibility table in {doc} is not what this run measured; "
             "run `bash scripts/matrix.sh --write-docs` and commit")
PY
  done
fi

if [ "$failed" -gt 0 ]; then
  echo "matrix: $failed scenario(s) failed" >&2
  exit 1
fi
