"""Lines up each hand-off of one run with `perf sched timehist` (issue 15, item 3).

Usage: python3 benches/handoff-sched.py DUMP.json TIMEHIST.txt (see handoff-sched.sh).

For every hand-off (the previous release until this acquisition) it sums, over
that window:
  * queued: time the threads on the hand-off's path (the waiter processes'
    threads and redis-server) spent runnable but waiting for a core;
  * redis ran / waiters ran / others ran: CPU time each used on the 2 cores;
  * idle: CPU time no one used.
and compares the slow hand-offs (over 3x the median) with the fast half.
"""
import json
import re
import statistics
import sys

LINE = re.compile(
    r"^\s*([\d.]+)\s+\[(\d+)\]\s+(\S+?)(?:\[(-?\d+)(?:/(\d+))?\])?\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
)


def main(dump_path, timehist_path):
    dump = json.load(open(dump_path))
    offset = dump["realtime_minus_monotonic_us"]
    workers = set(dump["worker_pids"])
    redis = dump["redis_pid"]
    stamps = sorted(tuple(s) for s in dump["stamps"])
    windows = []
    previous = dump["released_at"]
    for acquired, released in stamps:
        windows.append((previous - offset, acquired - offset))
        previous = released

    # (who, wakeup, switched in, switched out), in µs of CLOCK_MONOTONIC.
    slices = []
    for line in open(timehist_path):
        m = LINE.match(line)
        if not m:
            continue
        out_at = float(m.group(1)) * 1e6
        name, tid, pid = m.group(3), m.group(4), m.group(5)
        delay, ran = float(m.group(7)) * 1e3, float(m.group(8)) * 1e3
        pid = int(pid or tid or -1)
        if name == "<idle>":
            who = "idle"
        elif pid == redis:
            who = "redis"
        elif pid in workers:
            who = "waiters"
        else:
            who = "others"
        in_at = out_at - ran
        slices.append((who, in_at - delay, in_at, out_at))
    slices.sort(key=lambda s: s[2])

    def overlap(a, b, c, d):
        return max(0.0, min(b, d) - max(a, c))

    rows = []
    for k, (start, end) in enumerate(windows):
        row = {"k": k, "us": end - start, "queued": 0.0, "redis": 0.0,
               "waiters": 0.0, "others": 0.0, "idle": 0.0}
        for who, woken, in_at, out_at in slices:
            if out_at < start or woken > end:
                continue
            if who in ("redis", "waiters"):
                row["queued"] += overlap(start, end, woken, in_at)
            row[who] += overlap(start, end, in_at, out_at)
        rows.append(row)
    if not rows:
        sys.exit("no hand-offs")

    median = statistics.median(r["us"] for r in rows)
    by_time = sorted(rows, key=lambda r: r["us"])
    groups = [
        ("fastest half", by_time[: len(rows) // 2]),
        ("slow (> 3x median)", [r for r in rows if r["us"] > 3 * median]),
        ("slow, the first (cold) one left out", [r for r in rows if r["us"] > 3 * median and r["k"] > 0]),
    ]
    cols = ["us", "queued", "redis", "waiters", "others", "idle"]
    print(f"{len(rows)} hand-offs, median {median:.0f} µs\n")
    print("| hand-offs | n | hand-off µs | queued on the path | redis ran | waiters ran | others ran | idle |")
    print("|---|---|---|---|---|---|---|---|")
    for label, group in groups:
        if not group:
            print(f"| {label} | 0 | | | | | | |")
            continue
        means = [statistics.mean(r[c] for r in group) for c in cols]
        print(f"| {label} | {len(group)} | " + " | ".join(f"{m:.0f}" for m in means) + " |")
    print("\nslowest ten (hand-off #k: µs, then the split as above):")
    for r in by_time[::-1][:10]:
        print(f"  #{r['k']}: {r['us']:.0f} = queued {r['queued']:.0f}, redis ran {r['redis']:.0f}, "
              f"waiters ran {r['waiters']:.0f}, others ran {r['others']:.0f}, idle {r['idle']:.0f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
