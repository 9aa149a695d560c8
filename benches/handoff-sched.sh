#!/usr/bin/env bash
# Where a hand-off's tail goes (issue 15, item 3): one hand-off run under
# `perf sched record`, then each hand-off lined up with the scheduler's record
# of the threads on its path (the waiters' runtime threads and redis-server).
# Needs Debian's linux-perf and root (or kernel.perf_event_paranoid <= -1).
# Usage: bash benches/handoff-sched.sh [waiters=1000] [processes=1]
set -euo pipefail
cd "$(dirname "$0")/.."
waiters=${1:-1000}
processes=${2:-1}
cargo build --release -q -p redisson-lock-bench
perf sched record -q -k monotonic -o target/handoff-sched.data -- \
  env HANDOFF_DUMP=target/handoff-dump.json \
  target/release/redisson-lock-bench handoff redisson-lock "$waiters" "$processes"
perf sched timehist -i target/handoff-sched.data > target/handoff-sched.txt 2>/dev/null
python3 benches/handoff-sched.py target/handoff-dump.json target/handoff-sched.txt
