"""Makes docs/safety.md's tables and docs/safety.png from a full safety run
(tests/failover, `bash scripts/safety.sh`): one row per deployment, fault and
replica-quorum setting."""
import json
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1]
out = sys.argv[2]
cells = json.load(open(src))

QUORUM = {"Off": "off", "Any": "any (default)", "All": "all"}


def recovery(c):
    r = [x for x in c["recovery_ms"] if x == x]  # NaN: never recovered
    if not r:
        return "never"
    return f"{statistics.median(r):.0f} / {max(r):.0f}"


def errors(c):
    top = sorted(c["errors"].items(), key=lambda kv: -kv[1])[:4]
    return ", ".join(f"{k} {v}" for k, v in top) or "none"


rows = [
    "| deployment | fault | quorum | failovers | sections (JVM) | Rust sections told at risk | silent (of which at risk) | silent after a JVM holder "
    "| fenced | signalled: lost first / new holder told | token regressions (after a JVM token) "
    "| Rust tokens handed out twice (first holder told at risk) | recovery p50 / max (ms) |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
]
for c in cells:
    rows.append(
        f"| {c['deployment']} | {c['fault']} | {QUORUM[c['quorum']]} | {c['failovers']} of {c['episodes']}"
        f"{' (' + str(len(c.get('failed_faults', []))) + ' failed)' if c.get('failed_faults') else ''} "
        f"| {c['sections']} ({c['jvm_sections']}) | {c.get('told_at_risk', '-')} | **{c['silent']}** ({c['silent_but_at_risk']}) | {c['silent_after_jvm']} "
        f"| {c.get('fenced', 0)} | {c['signalled_lost']} / {c['signalled_new_holder']} "
        f"| **{c['token_regressions']}** ({c['token_regressions_after_jvm']}) "
        f"| **{c.get('repeated_tokens', 0)}** ({c.get('repeated_tokens_at_risk', 0)}) | {recovery(c)} |"
    )
table = "\n".join(rows) + "\n"

err_rows = ["| deployment | quorum | errors seen by the clients (by kind) |", "|---|---|---|"]
for c in cells:
    if c["errors"]:
        err_rows.append(f"| {c['deployment']} | {QUORUM[c['quorum']]} | {errors(c)} |")
err_table = "\n".join(err_rows) + "\n"

# Every timeline is in the JSON; the page shows the first few of each row,
# which with the check off are many of one shape.
SHOWN = 5
timelines = []
for c in cells:
    for t in c["timelines"][:SHOWN]:
        timelines.append(f"* {c['deployment']}, {c['fault']}, quorum {QUORUM[c['quorum']]}: {t}")
    more = len(c["timelines"]) - SHOWN
    if more > 0:
        timelines.append(
            f"* {c['deployment']}, {c['fault']}, quorum {QUORUM[c['quorum']]}: {more} more "
            "(`timelines` in [safety-results.json](safety-results.json))"
        )
timeline_text = ("\n".join(timelines) if timelines else "None in this run.") + "\n"

doc_path = f"{out}/safety.md"
doc = open(doc_path).read()
for name, text in (("table", table), ("errors", err_table), ("timelines", timeline_text)):
    pattern = re.compile(rf"(<!-- safety-{name}:begin -->\n)(.*?)(<!-- safety-{name}:end -->)", re.S)
    if not pattern.search(doc):
        sys.exit(f"{doc_path} has no safety-{name} block")
    doc = pattern.sub(lambda m: m.group(1) + text + m.group(3), doc)
open(doc_path, "w").write(doc)

# The plot: overlaps per fault, one panel per deployment, one bar group per quorum.
deployments = list(dict.fromkeys(c["deployment"] for c in cells))
quorums = list(dict.fromkeys(c["quorum"] for c in cells))
fig, axes = plt.subplots(1, len(deployments), figsize=(6 * len(deployments), 4.5), squeeze=False)
width = 0.8 / len(quorums)
for ax, dep in zip(axes[0], deployments):
    faults = list(dict.fromkeys(c["fault"] for c in cells if c["deployment"] == dep))
    for k, q in enumerate(quorums):
        silent, signalled, jvm = [], [], []
        for f in faults:
            c = next((c for c in cells if c["deployment"] == dep and c["fault"] == f and c["quorum"] == q), None)
            silent.append(c["silent"] if c else 0)
            jvm.append(c["silent_after_jvm"] if c else 0)
            signalled.append(
                (c["signalled_lost"] + c["signalled_new_holder"]) if c else 0
            )
        xs = [i + k * width for i in range(len(faults))]
        ax.bar(xs, silent, width, label=f"{QUORUM[q]}: silent", color=f"C{k}")
        ax.bar(xs, jvm, width, bottom=silent, label=f"{QUORUM[q]}: silent after JVM", color=f"C{k}", alpha=0.55)
        bottom = [a + b for a, b in zip(silent, jvm)]
        ax.bar(xs, signalled, width, bottom=bottom, label=f"{QUORUM[q]}: signalled", color=f"C{k}", alpha=0.25,
               hatch="//")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(faults))])
    ax.set_xticklabels(faults, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], 1))
    ax.set_ylabel("overlapping critical sections")
    ax.set_title(f"{dep}: overlaps per fault kind")
axes[0][-1].legend(fontsize=7)
fig.tight_layout()
fig.savefig(f"{out}/safety.png", dpi=110)
print(table)
