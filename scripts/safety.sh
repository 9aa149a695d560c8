#!/usr/bin/env bash
# The full safety runs (docs/safety.md).
#
# The failover run: every fault of tests/failover, SAFETY_EPISODES times each
# (default 5), for every replica-quorum setting, on a Sentinel and a Cluster
# deployment with Rust and JVM Redisson 4.7.0 clients; then the tables and
# the plot in docs/ are made from what ran. About 55 minutes with the
# default 5 episodes on a 2-core machine (33 with SAFETY_EPISODES=3).
#
# The routine-operations run (--routine): every operation of tests/routine
# (rolling restarts of replicas and sentinels, a sentinel frozen or cut off
# the primary, a replica killed, slowed or in full resync, the primary under
# CLIENT PAUSE WRITE, a cluster replica cut off the bus) at short timings
# and at production defaults, with the crate and Redisson 4.7.0 in the same
# run; then the routine-operations table in docs/safety.md.
#
# Needs redis-server and redis-cli, java and maven (as .ci/run installs
# them) and python3.
#
#   bash scripts/safety.sh                        failover run, then docs/safety.md's tables and plot
#   bash scripts/safety.sh --report-only          only remake those from target/safety/results.json
#   bash scripts/safety.sh --routine              routine-operations run, then its table in docs/safety.md
#   bash scripts/safety.sh --routine-report-only  only remake that table from target/safety/routine.json
#   bash scripts/safety.sh --routine-bounded      the bounded form (CI's), then its own table there
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --routine-bounded)
    # The test fails on what it does not allow, after writing its rows:
    # the table is made either way (from this run's rows only).
    rm -f target/safety/routine-bounded.json
    cargo test --test routine -- --nocapture routine_operations_lose_nothing_and_refuse_little || true
    cp target/safety/routine-bounded.json docs/routine-bounded-results.json
    python3 scripts/routine_report.py docs/routine-bounded-results.json docs/safety.md routine-bounded
    exit 0
    ;;
  --routine | --routine-report-only)
    if [ "$1" = --routine ]; then
      cargo test --release --test routine -- --ignored --nocapture full_routine_run
    fi
    cp target/safety/routine.json docs/routine-results.json
    python3 scripts/routine_report.py docs/routine-results.json docs/safety.md
    exit 0
    ;;
  "" | --report-only) ;;
  *)
    echo "usage: $0 [--report-only | --routine | --routine-report-only | --routine-bounded]" >&2
    exit 2
    ;;
esac
if [ "${1:-}" != "--report-only" ]; then
  cargo test --release --test failover -- --ignored --nocapture full_safety_run
fi
if [ ! -x target/plot-venv/bin/python ]; then
  python3 -m venv target/plot-venv
  target/plot-venv/bin/pip install -q matplotlib
fi
cp target/safety/results.json docs/safety-results.json
target/plot-venv/bin/python scripts/safety_report.py docs/safety-results.json docs
