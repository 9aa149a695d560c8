#!/usr/bin/env bash
# The server's CPU per lock + unlock pair under one implementation:
#   bash benches/redis-cpu.sh <lock|wire|floor|rslock> <concurrency> <seconds>
# runs one `profile` pass, which starts its own redis-server, and samples that
# server's user + system time from /proc over the middle of the pass
# (<seconds> at least 3). Needs: cargo build --release -p redisson-lock-bench
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 3 ] || [[ "$1" == *,* ]] || [ "$3" -lt 3 ]; then
  echo "usage: $0 <lock|wire|floor|rslock> <concurrency> <seconds, 3 or more>" >&2
  exit 2
fi
if [ -n "${REDIS_URL:-}" ]; then
  echo "unset REDIS_URL: the pass must start its own redis-server" >&2
  exit 2
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
./target/release/redisson-lock-bench profile "$1" "$2" "$3" > "$out" 2>/dev/null &
bench=$!
sleep 0.8
server=$(pgrep -P "$bench" -x redis-server || true)
if [ -z "$server" ]; then
  echo "no redis-server under the bench process (is the release build there?)" >&2
  kill "$bench" 2>/dev/null || true
  exit 1
fi
window=$(( $3 / 2 ))
ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
a=$(ticks); t0=$(date +%s.%N)
sleep "$window"
b=$(ticks); t1=$(date +%s.%N)
wait "$bench"
ops=$(grep -o '[0-9]* ops/s' "$out" | cut -d' ' -f1)
python3 -c "
cpu = ($b - $a) / $(getconf CLK_TCK); t = $t1 - $t0; ops = $ops
print(f'$1 c=$2: {ops} pairs/s, redis {cpu / t * 100:.0f}% of a core, '
      f'{cpu / t / ops * 1e6:.1f} us server CPU per pair')"
