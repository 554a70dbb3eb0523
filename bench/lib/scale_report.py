#!/usr/bin/env python3
"""The markdown tables of bench/scale.sh from its points.jsonl, rewritten after every point
so that a run cut short still leaves a table of what it measured.

  scale_report.py POINTS.jsonl RESULTS.md HEADER_LINE [STATUS_LINE] [NOTES]
  scale_report.py --self-test     (made-up points, checks the arithmetic; run by CI)

Three tables, one per kind of point (a point's "phase"; points without one, from runs
before issue #28, are cores points of random base lookups):
- base lookups by server cores K (the cores and shared phases): per server the median
  over repetitions of ops/s and of ops per CPU-second (the server's utime + stime from
  /proc/PID/stat over the ldclt run); the CPU efficiency, ops per CPU-second at K / ops
  per CPU-second at K = 1 (issue #28's measure: what a lookup costs in CPU as shards are
  added, whatever the client manages to send), and the throughput scaling, ops/s at K /
  (K x ops/s at 1) (issue #14's, which a client-bound or shared row holds down);
- client threads at one K (the threads phase, the 2007 test's shape);
- the other scenarios at that K (sub10, modify, mixed).
A repetition with any ldclt error makes the cell BROKEN instead of a number. NOTES (lines)
are what the script skipped or changed on this machine (a phase run at a smaller K)."""
import json
import os
import statistics
import sys
from collections import defaultdict

TARGETS = ((8, 0.85), (16, 0.75))  # issue #28: CPU efficiency at K shards


def load(path):
    points = []
    for line in open(path):
        line = line.strip()
        if line:
            p = json.loads(line)
            p.setdefault("phase", "cores")
            p.setdefault("scenario", "base")
            points.append(p)
    return points


def group_key(p):
    """Which points are repetitions of one another."""
    if p["phase"] in ("cores", "shared"):
        return ("base", p["cores"], p["server"])
    if p["phase"] == "threads":
        return ("threads", p["cores"], p["threads"], p["server"])
    return ("scenario", p["cores"], p["scenario"], p["server"])


def medians(points):
    """group key -> (ops/s, ops per CPU-second) or ("BROKEN", None)."""
    runs = defaultdict(list)
    for p in points:
        runs[group_key(p)].append(p)
    out = {}
    for key, rs in runs.items():
        if any(r["errors"] for r in rs):
            out[key] = ("BROKEN", None)
            continue
        ops = statistics.median(r["ops_per_s"] for r in rs)
        per_cpu = [r["ops_per_cpu_s"] for r in rs if r.get("ops_per_cpu_s")]
        out[key] = (ops, statistics.median(per_cpu) if per_cpu else None)
    return out


def number(v, digits=0):
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    return f"{v:,.{digits}f}"


def pct(v):
    return "–" if v is None else f"{100 * v:.0f}%"


def ratio(a, b):
    return a / b if isinstance(a, float) and isinstance(b, float) and b else None


def scaling(med, k, server):
    """ops/s at K / (K x ops/s at 1): issue #14's efficiency."""
    ops, _ = med.get(("base", k, server), (None, None))
    one, _ = med.get(("base", 1, server), (None, None))
    r = ratio(ops, one)
    return r / k if r is not None else None


def cpu_efficiency(per_cpu, med, server):
    """ops per CPU-second (of some point) / ops per CPU-second at K = 1: issue #28's."""
    _, one = med.get(("base", 1, server), (None, None))
    return ratio(per_cpu, one)


def ahead(verdicts):
    """[(K, ferrodir/slapd or None)] -> the verdict; None (a broken or missing run) is
    neither ahead nor behind, and said so."""
    behind = [k for k, r in verdicts if r is not None and r <= 1]
    unknown = [k for k, r in verdicts if r is None]
    if not verdicts or len(unknown) == len(verdicts):
        return "not measured"
    text = "no (behind at K = " + ", ".join(map(str, behind)) + ")" if behind else "yes"
    if unknown:
        text += " (not comparable at K = " + ", ".join(map(str, unknown)) + ": a run broken or missing)"
    return text


def base_table(points, med):
    info = {}
    for p in points:
        if p["phase"] in ("cores", "shared"):
            info.setdefault(p["cores"], p)
    if not info:
        return [], []
    lines = ["### Random base lookups by server cores (8 ldclt threads per server core)", "",
             "| server cores | client cores | ldclt threads | slapd threads | ferrodir ops/s | ferrodir ops/CPU-s "
             "| ferrodir CPU efficiency | ferrodir scaling | slapd ops/s | slapd ops/CPU-s | slapd CPU efficiency "
             "| slapd scaling | ferrodir/slapd | null ops/s |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    verdicts = []
    for k in sorted(info):
        (fo, fc), (so, sc), (no, _) = (med.get(("base", k, s), (None, None)) for s in ("ferrodir", "slapd", "null"))
        r = ratio(fo, so)
        verdicts.append((k, r))
        client = f"{info[k]['client_cpus']} ({info[k]['client_label']})" if info[k]["client_label"] else info[k]["client_cpus"]
        lines.append(f"| {k} | {client} | {info[k]['threads']} | {info[k]['slapd_threads']} | {number(fo)} | {number(fc)} | "
                     f"{pct(cpu_efficiency(fc, med, 'ferrodir'))} | {pct(scaling(med, k, 'ferrodir'))} | "
                     f"{number(so)} | {number(sc)} | {pct(cpu_efficiency(sc, med, 'slapd'))} | {pct(scaling(med, k, 'slapd'))} | "
                     f"{number(r, 2)} | {number(no)} |")
    lines += ["", "CPU efficiency = ops per CPU-second at K / ops per CPU-second at K = 1 (the same server, this run); "
              "scaling = ops/s at K / (K × ops/s at K = 1).", ""]
    return lines, verdicts


def threads_table(points, med):
    ks = sorted({p["cores"] for p in points if p["phase"] == "threads"})
    lines = []
    for k in ks:
        ts = sorted({p["threads"] for p in points if p["phase"] == "threads" and p["cores"] == k})
        lines += [f"### Client threads at {k} server core{'s' if k > 1 else ''} (random base lookups; the 2007 test's shape)", "",
                  "| ldclt threads | ferrodir ops/s | ferrodir ops/CPU-s | ferrodir CPU efficiency | slapd ops/s "
                  "| slapd ops/CPU-s | slapd CPU efficiency | ferrodir/slapd |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for t in ts:
            (fo, fc), (so, sc) = (med.get(("threads", k, t, s), (None, None)) for s in ("ferrodir", "slapd"))
            lines.append(f"| {t} | {number(fo)} | {number(fc)} | {pct(cpu_efficiency(fc, med, 'ferrodir'))} | "
                         f"{number(so)} | {number(sc)} | {pct(cpu_efficiency(sc, med, 'slapd'))} | {number(ratio(fo, so), 2)} |")
        lines.append("")
    return lines


def scenario_table(points, med):
    ks = sorted({p["cores"] for p in points if p["phase"] == "scenarios"})
    lines = []
    for k in ks:
        first = {}
        for p in points:
            if p["phase"] == "scenarios" and p["cores"] == k:
                first.setdefault((p["scenario"], p["server"]), p)
        scs = list(dict.fromkeys(sc for sc, _ in first))
        lines += [f"### Other scenarios at {k} server core{'s' if k > 1 else ''}", "",
                  "| scenario | ldclt threads | ferrodir ops/s | ferrodir ops/CPU-s | slapd ops/s | slapd ops/CPU-s "
                  "| ferrodir/slapd | ferrodir/slapd per CPU-second |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for sc in scs:
            (fo, fc), (so, scpu) = (med.get(("scenario", k, sc, s), (None, None)) for s in ("ferrodir", "slapd"))
            p = first.get((sc, "ferrodir")) or first.get((sc, "slapd"))
            threads = p["threads"]
            if sc == "mixed":
                threads = f"{p.get('search_threads', '?')} search + {p.get('modify_threads', '?')} modify"
            lines.append(f"| {sc} | {threads} | {number(fo)} | {number(fc)} | {number(so)} | {number(scpu)} | "
                         f"{number(ratio(fo, so), 2)} | {number(ratio(fc, scpu), 2)} |")
        lines += ["", "sub10: a substring search returning ~11 entries; modify: a durable replace of description "
                  "as the rootDN; mixed: base lookups and modifies 8:2 at once (ops/s counts both).", ""]
    return lines


def report(points, header, status, notes=""):
    med = medians(points)
    lines = [header, ""]
    if status:
        lines += [status, ""]
    notes = [n for n in notes.splitlines() if n.strip()]
    if notes:
        lines += ["Notes:"] + [f"- {n}" for n in notes] + [""]
    base, verdicts = base_table(points, med)
    lines += base + threads_table(points, med) + scenario_table(points, med)
    goals = []
    for k, goal in TARGETS:
        _, fc = med.get(("base", k, "ferrodir"), (None, None))
        e = cpu_efficiency(fc, med, "ferrodir")
        goals.append(f"at {k} shards ≥ {pct(goal)}: " + ("not measured in this run" if e is None
                     else f"{pct(e)}, {'met' if e >= goal else 'missed'}"))
    lines.append("Targets (issue #28): ferrodir CPU efficiency (ops per CPU-second against 1 shard's) "
                 + "; ".join(goals) + ". Ahead of slapd at every server-core count: " + ahead(verdicts) + ".")
    return "\n".join(lines) + "\n"


def self_test():
    """Made-up points: two repetitions at K = 1 and one at 8 and 16 (ferrodir's ops per
    CPU-second at 8 = 0.85 of K = 1's, at 16 = 0.70), one broken slapd run at K = 16, a
    threads and a scenarios point, an old point without a phase."""
    def point(k, server, rep, ops, errors=0, per_cpu=1000.0, phase="cores", scenario="base", threads=None, **extra):
        p = {"phase": phase, "scenario": scenario, "cores": k, "server": server, "rep": rep,
             "threads": threads or 8 * k, "slapd_threads": max(2, k),
             "client_label": "shared with the server" if k == 16 else "", "server_cpus": f"0-{k - 1}",
             "client_cpus": f"{k}-15" if k < 16 else "0-15", "ops_per_s": ops, "errors": errors, "ops_per_cpu_s": per_cpu}
        p.update(extra)
        return p
    old = point(2, "ferrodir", 1, 15000.0, per_cpu=950.0)
    del old["phase"], old["scenario"]
    points = [point(1, "ferrodir", 1, 9000.0), point(1, "ferrodir", 2, 11000.0, per_cpu=1200.0),
              point(1, "slapd", 1, 8000.0, per_cpu=500.0), point(1, "null", 1, 50000.0, per_cpu=0),
              point(8, "ferrodir", 1, 8 * 10000.0 * 0.5, per_cpu=935.0), point(8, "slapd", 1, 8 * 8000.0 * 0.5, per_cpu=250.0),
              point(16, "ferrodir", 1, 100000.0, per_cpu=770.0, phase="shared"),
              point(16, "slapd", 1, 0.0, errors=1, per_cpu=0, phase="shared"),
              point(8, "ferrodir", 1, 20000.0, per_cpu=550.0, phase="threads", threads=5),
              point(8, "slapd", 1, 10000.0, per_cpu=200.0, phase="threads", threads=5),
              point(8, "ferrodir", 1, 30000.0, per_cpu=600.0, phase="scenarios", scenario="mixed", threads=64,
                    search_threads=51, modify_threads=13),
              point(8, "slapd", 1, 3000.0, per_cpu=100.0, phase="scenarios", scenario="mixed", threads=64),
              old]
    points = [dict(p, **({} if "phase" in p else {"phase": "cores", "scenario": "base"})) for p in points]
    med = medians(points)
    assert med[("base", 1, "ferrodir")] == (10000.0, 1100.0), med[("base", 1, "ferrodir")]
    assert abs(cpu_efficiency(935.0, med, "ferrodir") - 0.85) < 1e-9
    assert abs(scaling(med, 8, "ferrodir") - 0.5) < 1e-9
    assert abs(cpu_efficiency(250.0, med, "slapd") - 0.5) < 1e-9
    assert med[("base", 16, "slapd")] == ("BROKEN", None)
    assert med[("base", 1, "null")] == (50000.0, None)
    text = report(points, "header", "**INCOMPLETE: test**", "threads phase at K=1\n")
    assert "| 8 | 8-15 | 64 | 8 | 40,000 | 935 | 85% | 50% | 32,000 | 250 | 50% | 50% | 1.25 | – |" in text, text
    assert "| 16 | 0-15 (shared with the server) | 128 | 16 | 100,000 | 770 | 70% | 62% | BROKEN |" in text, text
    assert "| 2 | 2-15 | 16 | 2 | 15,000 | 950 | 86% | 75% |" in text, text  # the old point
    assert "| 5 | 20,000 | 550 | 50% | 10,000 | 200 | 40% | 2.00 |" in text, text
    assert "| mixed | 51 search + 13 modify | 30,000 | 600 | 3,000 | 100 | 10.00 | 6.00 |" in text, text
    assert "at 8 shards ≥ 85%: 85%, met; at 16 shards ≥ 75%: 70%, missed" in text, text
    assert "**INCOMPLETE: test**" in text and "- threads phase at K=1" in text, text
    assert "every server-core count: no (behind at K = 2) (not comparable at K = 16: a run broken or missing)" not in text
    assert "every server-core count: yes (not comparable at K = 2, 16: a run broken or missing)" in text, text
    assert ahead([(1, 1.2), (2, 0.9), (4, None)]) == "no (behind at K = 2) (not comparable at K = 4: a run broken or missing)"
    only_threads = report([p for p in points if p["phase"] == "threads"], "h", "")
    assert "not measured in this run" in only_threads and "Client threads at 8" in only_threads, only_threads
    print("scale_report self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    points_path, md_path, header = sys.argv[1:4]
    status = sys.argv[4] if len(sys.argv) > 4 else ""
    notes = sys.argv[5] if len(sys.argv) > 5 else ""
    text = report(load(points_path), header, status, notes)
    with open(md_path + ".tmp", "w") as f:
        f.write(text)
    os.replace(md_path + ".tmp", md_path)  # a reader never sees half a table


if __name__ == "__main__":
    main()
