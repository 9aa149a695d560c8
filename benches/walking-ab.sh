#!/usr/bin/env bash
# Issue 25, item 5 (docs/benchmarks.md, section 7): the same harness against
# the library before the cost bound on walking scripts (BASE, default
# 2506852) and as checked out, alternated on one machine:
#   giveups 5000 256       3 times each
#   profile lock,fair C 4  for C in 1 16 256, 6 times each
# The harness's sources (giveups, profile fair) are this checkout's in both.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:-2506852}
work=$PWD/target/walking-ab
rm -rf "$work" && mkdir -p "$work"
git clone -q . "$work/base"
git -C "$work/base" checkout -q "$base"
cp benches/src/giveups.rs benches/src/throughput.rs benches/src/main.rs "$work/base/benches/src/"
# A target directory of its own: cargo hashes a workspace's crates without
# their path, so a shared one would take the base's build as this
# checkout's when the checkout's files are older than it.
(cd "$work/base" && CARGO_TARGET_DIR="$work/target" cargo build -q --release -p redisson-lock-bench)
cp "$work/target/release/redisson-lock-bench" "$work/before"
cargo build -q --release -p redisson-lock-bench
cp target/release/redisson-lock-bench "$work/after"
# Which build runs first alternates: the first of a pair tends to do better.
order() { if [ $(($1 % 2)) -eq 1 ]; then echo before after; else echo after before; fi; }
for rep in 1 2 3; do
  for b in $(order $rep); do echo "$b: $("$work/$b" giveups 5000 256 2>/dev/null | tail -1)"; done
done
for rep in 1 2 3 4 5 6; do
  for c in 1 16 256; do
    for b in $(order $rep); do
      "$work/$b" profile lock,fair "$c" 4 2>/dev/null | sed "s/^/$b: /"
    done
  done
done
