#!/usr/bin/env bash
# An experiment, not the shipped build: fred 10.1 flushes its socket after
# every EVAL, EVALSHA and custom command (`CommandKind::should_flush`), where
# it batches other commands until its queue is empty. This copies fred from
# cargo's registry into target/, drops those three kinds from the rule (the
# only change), and runs the throughput benchmark against that copy through a
# one-off `--config patch...`, so nothing committed depends on it.
#
#   bash benches/fred-flush-experiment.sh --quick
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/fred-10.1.0 | head -n 1)
dst=target/fred-flush-experiment
rm -rf "$dst" && mkdir -p "$dst" && cp -r "$src"/. "$dst"/
python3 - "$dst/src/protocol/command.rs" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
old = """        | CommandKind::Eval
        | CommandKind::EvalSha
        | CommandKind::Fcall
        | CommandKind::FcallRO
        | CommandKind::_Custom(_)
    )"""
new = """        | CommandKind::Fcall
        | CommandKind::FcallRO
    )"""
assert text.count(old) == 1, "fred's should_flush is not the one this experiment knows"
open(path, "w").write(text.replace(old, new))
PY
# The patch rewrites Cargo.lock's fred entry for the run; put it back after.
cp Cargo.lock target/Cargo.lock.before-experiment
trap 'cp target/Cargo.lock.before-experiment Cargo.lock' EXIT
cargo run --release -p redisson-lock-bench \
  --config "patch.crates-io.fred.path=\"$PWD/$dst\"" -- throughput-only "$@"
