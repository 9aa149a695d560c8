#!/usr/bin/env bash
# The server's CPU per lock + unlock pair under one implementation:
#   bash benches/redis-cpu.sh <lock|wire|floor> <concurrency> <seconds>
# runs one `profile` pass (which starts its own redis-server) and samples that
# server's user + system time from /proc over 2 s in the middle of the pass
# (so <seconds> must be at least 3).
# Needs a release build: cargo build --release -p redisson-lock-bench
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
./target/release/redisson-lock-bench profile "$1" "$2" "$3" > "$out" 2>/dev/null &
B=$!
sleep 0.8
P=$(pgrep -P $B redis-server | head -1)
a=$(awk '{print $14+$15}' /proc/$P/stat); t0=$(date +%s.%N)
sleep 2
b=$(awk '{print $14+$15}' /proc/$P/stat); t1=$(date +%s.%N)
wait $B
ops=$(grep -o '[0-9]* ops/s' "$out" | cut -d' ' -f1)
rm -f "$out"
python3 -c "
cpu=($b-$a)/$(getconf CLK_TCK); t=$t1-$t0; ops=$ops
print(f'$1 c=$2: {ops} pairs/s, redis {cpu/t*100:.0f}% of a core, {cpu/t/ops*1e6:.1f} us server CPU per pair')"
