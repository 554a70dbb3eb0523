#!/usr/bin/env python3
"""The table of bench/percore.sh: per layout (SHARDS@CPUS), the medians over repetitions
of what `perf stat -x,` counted on the server during one ldclt run, per operation.

  percore_report.py POINTS.jsonl      (prints markdown)
  percore_report.py --self-test"""
import json
import statistics
import sys
from collections import defaultdict

# perf event -> (column, scale per operation)
COLUMNS = [("task-clock", "CPU µs/op", 1e3), ("context-switches", "ctx switches/op", 1.0),
           ("cpu-migrations", "migrations/op", 1.0), ("raw_syscalls:sys_enter", "syscalls/op", 1.0),
           ("sched:sched_wakeup", "wakeups/op", 1.0), ("page-faults", "page faults/op", 1.0),
           ("instructions", "instructions/op", 1.0), ("cycles", "cycles/op", 1.0),
           ("cache-misses", "cache misses/op", 1.0)]


def perf_counts(text):
    """perf stat -x, output -> {event: value}; "<not supported>"/"<not counted>" left out.
    task-clock comes in milliseconds."""
    out = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) < 3 or line.startswith("#"):
            continue
        try:
            out[fields[2]] = float(fields[0])
        except ValueError:
            continue
    return out


def table(points):
    by = defaultdict(list)
    order = []
    for p in points:
        if p["layout"] not in by:
            order.append(p["layout"])
        by[p["layout"]].append(p)
    present = [c for c in COLUMNS if any(c[0] in p["counts"] for p in points)]
    lines = ["| layout (shards@CPUs) | runs | ops/s | " + " | ".join(c[1] for c in present) + " |",
             "| --- | ---: | ---: | " + " | ".join("---:" for _ in present) + " |"]
    med = {}
    for layout in order:
        rs = [r for r in by[layout] if r["ops_total"] and not r["errors"]]
        if not rs:
            lines.append(f"| {layout} | 0 | BROKEN |" + " |" * len(present))
            continue
        cells = []
        for event, _, scale in present:
            vals = [r["counts"][event] * scale / r["ops_total"] for r in rs if event in r["counts"]]
            v = statistics.median(vals) if vals else None
            med[(layout, event)] = v
            cells.append("–" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.3f}" if v < 1 else f"{v:.2f}"))
        ops = statistics.median(r["ops_per_s"] for r in rs)
        lines.append(f"| {layout} | {len(rs)} | {ops:,.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n", med


def load(path):
    points = []
    for line in open(path):
        if line.strip():
            p = json.loads(line)
            try:
                p["counts"] = perf_counts(open(p["perf_file"]).read())
            except OSError:
                p["counts"] = {}
            points.append(p)
    return points


def self_test():
    text = ("# started on Sat\n\n5012.5,msec,task-clock,5012500000,100.00,0.5,CPUs utilized\n"
            "200000,,context-switches,5012500000,100.00,39.9,K/sec\n"
            "<not supported>,,cycles,0,100.00,,\n")
    c = perf_counts(text)
    assert c == {"task-clock": 5012.5, "context-switches": 200000.0}, c
    points = [{"layout": "1@0", "ops_total": 100000, "ops_per_s": 10000.0, "errors": 0, "counts": c},
              {"layout": "1@0", "ops_total": 200000, "ops_per_s": 20000.0, "errors": 0, "counts": c},
              {"layout": "2@0-1", "ops_total": 0, "ops_per_s": 0.0, "errors": 1, "counts": {}}]
    md, med = table(points)
    # 5012.5 ms over 100k ops = 50.1 µs, over 200k = 25.1 µs: the median 37.6
    assert abs(med[("1@0", "task-clock")] - (50.125 + 25.0625) / 2) < 1e-9, med
    assert "| 1@0 | 2 | 15,000 | 37.59 | 1.50 |" in md, md
    assert "| 2@0-1 | 0 | BROKEN |" in md and "cycles" not in md, md
    print("percore_report self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    md, _ = table(load(sys.argv[1]))
    print(md, end="")


if __name__ == "__main__":
    main()
