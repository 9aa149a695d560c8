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
features=redisson-lock/redisson-config,redisson-lock/metrics

# What each row runs. Single server: every object family with its Redis
# layout, live against the JVM (lock, read-write, fair, fenced, spin, multi,
# semaphores, latch), and the CLI.
single=(--test lock_state --test read_write --test fair --test fenced_spin --test multi_run
        --test semaphore --test count_down_latch --test interop --test interop_sync)
# A cluster (3 primaries with a replica each): sharded pub/sub where the
# server has it, classic on Redis 6; JVM and Rust wake each other either way.
cluster=(--test cluster --test interop_cluster)
# Redis 6 lacks what three cluster tests use to look at the server, not the
# client: INFO errorstats (6.2), CLUSTER ADDSLOTSRANGE (7.0) and sharded
# channels that follow their slot (7.0); and the semaphore and latch test on
# a cluster checks sharded subscribers.
cluster_redis6=(--skip an_acquire_refused_with_moved --skip a_cluster_behind_one_address
                --skip waiters_follow_their_shard_subscription --skip semaphores_and_latches_wake)
# Sentinel: 1 primary, 2 replicas, 3 sentinels of the same server.
sentinel=(--test sentinel)

default_id=redis-7
results=$out/results.tsv
: > "$results.new"

# Runs one scenario; records "id version scenario outcome seconds".
run() {
  local id=$1 version=$2 binary=$3 scenario=$4; shift 4
  local started=$SECONDS log="$out/$id-$scenario.log" outcome=passed
  printf 'matrix: %-10s %-8s %-9s ' "$id" "$version" "$scenario"
  if ! REDIS_SERVER=$binary REDIS_SERVER_VERSION=$version \
      cargo test --locked --features "$features" "$@" >"$log" 2>&1; then
    outcome=failed
  fi
  local took=$((SECONDS - started))
  printf '%s in %ss\n' "$outcome" "$took"
  printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$version" "$scenario" "$outcome" "$took" >> "$results.new"
  if [ "$outcome" = failed ]; then
    grep -E "^(test .* FAILED|---- |thread .* panicked)" "$log" | head -20 >&2 || true
    echo "matrix: the whole log is $log" >&2
  fi
}

while IFS=$'\t' read -r id version binary; do
  [ -n "$id" ] || continue
  if [ "$id" = "$default_id" ]; then
    printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$version" single "whole suite" - >> "$results.new"
  else
    run "$id" "$version" "$binary" single "${single[@]}"
    run "$id" "$version" "$binary" cli -p redisson-lock-cli --test cli --test ops
  fi
  case "$id" in
    # The newest of each line, and Redis 6 (no sharded pub/sub).
    redis-8|valkey-8.1) run "$id" "$version" "$binary" cluster "${cluster[@]}" ;;
    redis-6) run "$id" "$version" "$binary" cluster "${cluster[@]}" -- "${cluster_redis6[@]}" ;;
    redis-7) printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$version" cluster "whole suite" - >> "$results.new" ;;
  esac
  case "$id" in
    valkey-8.0|valkey-8.1) run "$id" "$version" "$binary" sentinel "${sentinel[@]}" ;;
    redis-7) printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$version" sentinel "whole suite" - >> "$results.new" ;;
  esac
done <<< "$registry"
mv "$results.new" "$results"

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
