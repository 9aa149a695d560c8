#!/usr/bin/env bash
# The full safety run (docs/safety.md): every fault of tests/failover,
# SAFETY_EPISODES times each (default 5), for every replica-quorum setting, on
# a Sentinel and a Cluster deployment with Rust and JVM Redisson 4.7.0
# clients; then the tables and the plot in docs/ are made from what ran.
# About 40 minutes with the default 5 episodes (38 on a 2-core machine).
# Needs redis-server and redis-cli, java and maven (as .ci/run installs
# them) and python3.
#
#   bash scripts/safety.sh                 run, then write docs/safety.md's tables and plot
#   bash scripts/safety.sh --report-only   only remake the docs from target/safety/results.json
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--report-only" ]; then
  cargo test --release --test failover -- --ignored --nocapture full_safety_run
fi
if [ ! -x target/plot-venv/bin/python ]; then
  python3 -m venv target/plot-venv
  target/plot-venv/bin/pip install -q matplotlib
fi
cp target/safety/results.json docs/safety-results.json
target/plot-venv/bin/python scripts/safety_report.py docs/safety-results.json docs
