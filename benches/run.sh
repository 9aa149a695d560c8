#!/usr/bin/env bash
# Runs the benchmarks (about 21 minutes) and plots them into docs/.
# Needs redis-server, java (the interop peer jar: bash .ci/run builds it) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f tests/interop/java/target/interop-peer-4.7.0.jar ] ||
  mvn -q -B -Dstyle.color=never -f tests/interop/java/pom.xml -P redisson-4 package -DskipTests
cargo run --release -p redisson-lock-bench -- "$@" --out target/bench-results.json | tee target/bench-tables.md
cargo run --release -p redisson-lock-bench -- cluster "$@" --out target/bench-cluster.json | tee -a target/bench-tables.md
cargo run --release -p redisson-lock-bench -- ls 100000 "$@" --out target/bench-ls.json | tee -a target/bench-tables.md
cargo run --release -p redisson-lock-bench -- discovery "$@" --out target/bench-discovery.json | tee -a target/bench-tables.md
if [ ! -x target/plot-venv/bin/python ]; then
  python3 -m venv target/plot-venv
  target/plot-venv/bin/pip install -q matplotlib
fi
target/plot-venv/bin/python benches/plot.py target/bench-results.json docs
cp target/bench-results.json docs/bench-results.json
cp target/bench-cluster.json docs/bench-cluster.json
cp target/bench-ls.json docs/bench-ls.json
cp target/bench-discovery.json docs/bench-discovery.json
python3 benches/report.py docs/bench-results.json docs/benchmarks.md
