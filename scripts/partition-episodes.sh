#!/usr/bin/env bash
# Runs the partition tests (tests/partition.rs: real iptables partitions,
# root needed) N times and sums up each cell: episodes, failures, the
# rule-of-three bound on the failure rate ("no failure in n episodes: below
# 3/n with 95% confidence"), and the figures each episode printed.
#
#   bash scripts/partition-episodes.sh [N]     N runs (default 30), each
#                                              running the three cells at once
#
# Writes target/partition/episodes.log (every episode line) and prints the
# summary (also in target/partition/summary.md).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-30}
out=target/partition
mkdir -p "$out"
: > "$out/episodes.log"
cargo test --locked --features redisson-lock/redisson-config,redisson-lock/metrics,redisson-lock/blocking \
  --test partition --no-run 2>/dev/null
binary=$(cargo test --locked --features redisson-lock/redisson-config,redisson-lock/metrics,redisson-lock/blocking \
  --test partition --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="partition": print(m["executable"])')
for i in $(seq 1 "$runs"); do
  log="$out/run-$i.log"
  if "$binary" --nocapture >"$log" 2>&1; then status=passed; else status=failed; fi
  grep -h '^episode ' "$log" | sed "s/^/run=$i /" >>"$out/episodes.log" || true
  # A test that failed before printing its episode line still counts.
  for cell in a_client_cut_off:minority-side a_primary_that_resumes:resumed-mid-failover an_acknowledgement:unpromotable-ack; do
    name=${cell%%:*}
    if grep -q "^test ${name}.* FAILED" "$log"; then echo "run=$i failed cell=${cell#*:}" >>"$out/episodes.log"; fi
  done
  echo "partition: run $i of $runs $status"
done
python3 - "$out" <<'PY'
import collections, statistics, sys
out = sys.argv[1]
cells = collections.OrderedDict()
failed = collections.Counter()
for line in open(f"{out}/episodes.log"):
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    if line.split()[1] == "failed":
        failed[fields["cell"]] += 1
        continue
    cells.setdefault(fields["cell"], []).append(fields)
# What fails an episode of each cell (the test's own assertion).
bad = {
    "minority-side": lambda e: int(e["confirmed_after"]) > 0 or int(e["told_at_risk_ms"]) < 0,
    "resumed-mid-failover": lambda e: int(e["lost_confirmed"]) > 0,
    "unpromotable-ack": lambda e: int(e["confirmed_without_promotable"]) > 0,
}
lines = ["| cell | episodes | failures | rate below (95%) | figures (median, min-max) |", "|---|---|---|---|---|"]
for cell, eps in cells.items():
    n = len(eps) + failed[cell]
    f = sum(1 for e in eps if bad[cell](e)) + failed[cell]
    bound = f"{3 / n:.3f}" if f == 0 else "(failures)"
    figures = []
    for key in eps[0]:
        if key in ("run", "cell"):
            continue
        values = [int(e[key]) for e in eps]
        figures.append(f"{key} {statistics.median(values):g} ({min(values)}-{max(values)})")
    lines.append(f"| {cell} | {n} | {f} | {bound} | {'; '.join(figures)} |")
text = "\n".join(lines)
open(f"{out}/summary.md", "w").write(text + "\n")
print(text)
PY
