#!/usr/bin/env python3
"""The markdown table of bench/scale.sh from its points.jsonl, rewritten after every point
so that a run cut short still leaves a table of what it measured.

  scale_report.py POINTS.jsonl RESULTS.md HEADER_LINE [STATUS_LINE]
  scale_report.py --self-test     (made-up points, checks the arithmetic; run by CI)

Per server and core count K: the median over repetitions of ops/s and of ops per
CPU-second (the server's utime + stime from /proc/PID/stat over the ldclt run), and the
efficiency ops/s(K) / (K x ops/s(1)) against the same server's K = 1 row of this run. A
repetition with any ldclt error makes the cell BROKEN instead of a number."""
import json
import statistics
import sys
from collections import defaultdict


def load(path):
    points = []
    for line in open(path):
        line = line.strip()
        if line:
            points.append(json.loads(line))
    return points


def medians(points):
    """(K, server) -> (ops/s, ops per CPU-second) or ("BROKEN", None)."""
    runs = defaultdict(list)
    for p in points:
        runs[(p["cores"], p["server"])].append(p)
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


def efficiency(med, k, server):
    ops, _ = med.get((k, server), (None, None))
    one, _ = med.get((1, server), (None, None))
    if isinstance(ops, float) and isinstance(one, float) and one:
        return ops / (k * one)
    return None


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


def report(points, header, status):
    med = medians(points)
    info = {}
    for p in points:
        info.setdefault(p["cores"], p)
    lines = [header, ""]
    if status:
        lines += [status, ""]
    lines += ["| server cores | client cores | ldclt threads | slapd threads | ferrodir ops/s | ferrodir ops/CPU-s "
              "| ferrodir efficiency | slapd ops/s | slapd ops/CPU-s | slapd efficiency | ferrodir/slapd | null ops/s |",
              "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    pct = lambda v: "–" if v is None else f"{100 * v:.0f}%"
    verdicts = []
    for k in sorted(info):
        (fo, fc), (so, sc), (no, _) = (med.get((k, s), (None, None)) for s in ("ferrodir", "slapd", "null"))
        ratio = fo / so if isinstance(fo, float) and isinstance(so, float) and so else None
        verdicts.append((k, ratio))
        client = f"{info[k]['client_cpus']} ({info[k]['client_label']})" if info[k]["client_label"] else info[k]["client_cpus"]
        lines.append(f"| {k} | {client} | {info[k]['threads']} | {info[k]['slapd_threads']} | {number(fo)} | {number(fc)} | "
                     f"{pct(efficiency(med, k, 'ferrodir'))} | {number(so)} | {number(sc)} | {pct(efficiency(med, k, 'slapd'))} | "
                     f"{number(ratio, 2)} | {number(no)} |")
    lines.append("")
    eight = efficiency(med, 8, "ferrodir")
    lines.append("Target (issue #14): ferrodir efficiency at 8 shards ≥ 80%: "
                 + ("not measured in this run" if eight is None else f"{pct(eight)}, {'met' if eight >= 0.8 else 'missed'}")
                 + "; ahead of slapd at every point: " + ahead(verdicts) + ".")
    return "\n".join(lines) + "\n"


def self_test():
    """Made-up points: two repetitions at K = 1 and 8 (ferrodir at 8 x 0.85 of its K = 1,
    slapd at 8 x 0.5), one broken slapd run at K = 12, a point with no CPU time."""
    def point(k, server, rep, ops, errors=0, per_cpu=1000.0):
        return {"cores": k, "server": server, "rep": rep, "threads": 8 * k, "slapd_threads": max(2, k),
                "client_label": "client-bound: 4 client cores" if k == 12 else "", "server_cpus": f"0-{k - 1}",
                "client_cpus": f"{k}-15", "ops_per_s": ops, "errors": errors, "ops_per_cpu_s": per_cpu}
    points = [point(1, "ferrodir", 1, 9000.0), point(1, "ferrodir", 2, 11000.0), point(1, "slapd", 1, 8000.0),
              point(8, "ferrodir", 1, 8 * 10000.0 * 0.85, per_cpu=900.0), point(8, "slapd", 1, 8 * 8000.0 * 0.5),
              point(12, "ferrodir", 1, 100000.0), point(12, "slapd", 1, 0.0, errors=1, per_cpu=0),
              point(1, "null", 1, 50000.0, per_cpu=0)]
    med = medians(points)
    assert med[(1, "ferrodir")] == (10000.0, 1000.0), med[(1, "ferrodir")]
    assert abs(efficiency(med, 8, "ferrodir") - 0.85) < 1e-9
    assert abs(efficiency(med, 8, "slapd") - 0.5) < 1e-9
    assert med[(12, "slapd")] == ("BROKEN", None)
    assert med[(1, "null")] == (50000.0, None)
    text = report(points, "header", "**INCOMPLETE: test**")
    rows = [l for l in text.splitlines() if l.startswith("| 1")]
    assert "| 8 | 8-15 | 64 | 8 | 68,000 | 900 | 85% | 32,000 | 1,000 | 50% | 2.12 | – |" in text, text
    assert "12-15 (client-bound: 4 client cores)" in text and "| BROKEN |" in text, text
    assert "efficiency at 8 shards ≥ 80%: 85%, met" in text and "**INCOMPLETE: test**" in text, text
    assert "ahead of slapd at every point: yes (not comparable at K = 12: a run broken or missing)" in text, text
    assert ahead([(1, 1.2), (2, 0.9), (4, None)]) == "no (behind at K = 2) (not comparable at K = 4: a run broken or missing)"
    assert len(rows) == 2, rows  # K = 1 and K = 12
    print("scale_report self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    points_path, md_path, header = sys.argv[1:4]
    status = sys.argv[4] if len(sys.argv) > 4 else ""
    text = report(load(points_path), header, status)
    with open(md_path + ".tmp", "w") as f:
        f.write(text)
    import os
    os.replace(md_path + ".tmp", md_path)  # a reader never sees half a table


if __name__ == "__main__":
    main()
