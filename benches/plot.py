"""Plots benchmark results (target/bench-results.json) into docs/*.png."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1] if len(sys.argv) > 1 else "target/bench-results.json"
out = sys.argv[2] if len(sys.argv) > 2 else "docs"
results = json.load(open(src))

rows = results["throughput"]
impls = list(dict.fromkeys(r["implementation"] for r in rows))
levels = sorted({r["concurrency"] for r in rows})
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
width = 0.8 / len(impls)
for k, name in enumerate(impls):
    ops = [next((r["ops_per_sec"] for r in rows if r["implementation"] == name and r["concurrency"] == c), 0) for c in levels]
    p50 = [next((r["p50_us"] for r in rows if r["implementation"] == name and r["concurrency"] == c), 0) for c in levels]
    xs = [i + k * width for i in range(len(levels))]
    ax1.bar(xs, ops, width, label=name)
    ax2.bar(xs, p50, width, label=name)
for ax, title, unit in ((ax1, "lock + unlock throughput", "ops/s"), (ax2, "lock + unlock latency (p50)", "µs")):
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(levels))])
    ax.set_xticklabels([f"concurrency {c}" for c in levels])
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.set_yscale("log")
ax1.legend(fontsize=8)
fig.suptitle(f"Uncontended locks, one redis-server {results['redis_version']}, 2 cores shared by server and clients")
fig.tight_layout()
fig.savefig(f"{out}/bench-throughput.png", dpi=110)

wd = results["watchdog"]
if wd:
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([str(r["locks"]) for r in wd], [r["scripts_per_cycle"] for r in wd], label="scripts per cycle")
    for r in wd:
        ax.annotate(f"{r['cycle_ms']:.0f} ms, {r['client_bytes_per_lock']:.0f} B/lock",
                    (str(r["locks"]), r["scripts_per_cycle"]), ha="center", va="bottom", fontsize=8)
    ax.set_xlabel("held locks")
    ax.set_ylabel("renewal scripts per cycle")
    ax.set_title("Watchdog: one cycle")
    fig.tight_layout()
    fig.savefig(f"{out}/bench-watchdog.png", dpi=110)
print("plots written to", out)

ho = [r for r in results.get("handoff", []) if "fair" not in r["implementation"]]
if ho:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, procs in zip(axes, (1, 4)):
        names = list(dict.fromkeys(r["implementation"] for r in ho))
        counts = sorted({r["waiters"] for r in ho if r["processes"] == procs})
        width = 0.8 / len(names)
        for k, name in enumerate(names):
            p50 = [next((r["p50_us"] for r in ho if r["implementation"] == name and r["processes"] == procs and r["waiters"] == n), 0) for n in counts]
            ax.bar([i + k * width for i in range(len(counts))], p50, width, label=name)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(counts))])
        ax.set_xticklabels([f"{n} waiters" for n in counts])
        ax.set_yscale("log")
        ax.set_title(f"hand-off latency p50, waiters in {procs} process{'es' if procs > 1 else ''}")
        ax.set_ylabel("µs (unlock → next holder)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{out}/bench-handoff.png", dpi=110)
    print("hand-off plot written")
