"""Makes docs/safety.md's routine-operations table from a full run of
tests/routine (`bash scripts/safety.sh --routine`): one line per deployment,
timings, operation and client (the crate, the crate with ReplicaQuorum::All
on Sentinel, Redisson 4.7.0), and every false lost signal with its timeline.

    python3 scripts/routine_report.py docs/routine-results.json docs/safety.md

A third argument names other blocks of the document: `routine-bounded` fills
`<!-- routine-bounded-table:begin -->` and so on, from the bounded form's
`target/safety/routine-bounded.json` (`cargo test --test routine`).
"""
import json
import re
import sys

src, doc_path = sys.argv[1], sys.argv[2]
block = sys.argv[3] if len(sys.argv) > 3 else "routine"
rows = json.load(open(src))


def opt(v):
    return "–" if v is None else str(v)


def ms(v):
    return f"{v:.0f}"


table = [
    "| deployment | timings | operation | client | tries / refused | longest refusal (ms) "
    "| no-wait try p50 / max (ms) | at-risk | lost: true / false | silent overlaps |",
    "|---|---|---|---|---|---|---|---|---|---|",
]
for r in rows:
    operation = r["label"] + (" (**failed over**)" if r["failed_over"] else "")
    for i, c in enumerate(r["clients"]):
        first = i == 0
        lost = "–" if c["lost_true"] is None else f"{c['lost_true']} / **{c['lost_false']}**"
        table.append(
            f"| {r['deployment'] if first else ''} | {r['settings'] if first else ''} "
            f"| {operation if first else ''} | {c['client']} "
            f"| {c['tries']} / {c['refused']} | {ms(c['longest_refusal_ms'])} "
            f"| {c['try_p50_ms']:.1f} / {c['try_max_ms']:.0f} | {opt(c['at_risk'])} | {lost} "
            f"| **{c['silent_overlaps']}** |"
        )
table_text = "\n".join(table) + "\n"

lost = []
for r in rows:
    for c in r["clients"]:
        for t in c["false_lost"]:
            lost.append(f"* {r['deployment']}, {r['settings']}, {r['label']}, {c['client']}: {t}")
lost_text = ("\n".join(lost) if lost else "None in this run.") + "\n"

silent = []
for r in rows:
    for c in r["clients"]:
        for t in c["silent"]:
            silent.append(f"* {r['deployment']}, {r['settings']}, {r['label']}, after {c['client']}: {t}")
silent_text = ("\n".join(silent) if silent else "None in this run.") + "\n"

doc = open(doc_path).read()
for name, text in (("table", table_text), ("lost", lost_text), ("silent", silent_text)):
    pattern = re.compile(rf"(<!-- {block}-{name}:begin -->\n)(.*?)(<!-- {block}-{name}:end -->)", re.S)
    if not pattern.search(doc):
        sys.exit(f"{doc_path} has no {block}-{name} block")
    doc = pattern.sub(lambda m: m.group(1) + text + m.group(3), doc)
open(doc_path, "w").write(doc)
print(table_text)
