#!/usr/bin/env python3
"""bench/mesh.sh's table: reads its results.jsonl, prints Markdown (one row per mesh and
repetition, then the medians' ratios against the issue's targets).

  mesh_report.py RESULTS.jsonl
"""
import json
import statistics
import sys


def num(value):
    return value if isinstance(value, (int, float)) else None


def fmt(value, digits=1):
    if value is None:
        return "n/a"
    if isinstance(value, float) and abs(value) >= 1000:
        return f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    header = next((r for r in rows if r.get("type") == "header"), {})
    print(f"`{header.get('command', 'bench/mesh.sh')}`, {header.get('cores', '?')} cores, "
          f"load at start {header.get('load', '?')}, commit {header.get('commit', '?')}\n")
    by = {}
    for r in rows:
        if r.get("type") in ("write", "lag", "catchup"):
            by.setdefault((r["kind"], r["rep"]), {})[r["type"]] = r
    # "on all 3 /s": the load's writes over the time until every node held them (the load's
    # seconds plus the drain), what the mesh sustains when replication must keep up.
    print("| mesh | rep | modifies/s, 3 nodes | CPU µs/write (3 servers) | drain s | on all 3 /s | "
          "lag p50 / p99 / max ms (worst pair) | catch-up s (writes while down) | converged |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    kinds = {}
    for (kind, rep), got in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        w, l, c = got.get("write", {}), got.get("lag", {}), got.get("catchup", {})
        drain, total, secs = num(w.get("drain_s")), num(w.get("ops_total")), num(w.get("seconds"))
        on_all = total / (secs + drain) if None not in (drain, total, secs) and secs + drain > 0 else None
        conv = "/".join(str(x.get("converged", "n/a")) for x in (w, c) if x) or "n/a"
        print(f"| {kind} | {rep} | {fmt(num(w.get('ops_per_s')))} | {fmt(num(w.get('cpu_us_per_write')), 0)} | "
              f"{w.get('drain_s', 'n/a')} | {fmt(on_all)} | {fmt(num(l.get('lag_p50_ms')), 2)} / {fmt(num(l.get('lag_p99_ms')), 2)} / "
              f"{fmt(num(l.get('lag_max_ms')), 2)} | {c.get('catchup_s', 'n/a')} ({c.get('writes_while_down', 'n/a')}) | {conv} |")
        k = kinds.setdefault(kind, {"rate": [], "on_all": [], "p99": [], "catchup": []})
        if on_all is not None:
            k["on_all"].append(on_all)
        for key, src, field in (("rate", w, "ops_per_s"), ("p99", l, "lag_p99_ms"), ("catchup", c, "catchup_s")):
            if num(src.get(field)) is not None:
                k[key].append(src[field])
    med = {kind: {key: (statistics.median(v) if v else None) for key, v in k.items()} for kind, k in kinds.items()}
    fd, sl = med.get("ferrodir"), med.get("slapd")
    if not (fd and sl):
        return
    print()
    if "--smoke" in header.get("command", ""):
        print("- smoke run (each ldclt thread capped at 500 modifies, seconds of lag and downtime): "
              "it checks that both meshes work and converge; its ratios mean nothing.")
        return

    def ratio(key, target, better_high):
        a, b = fd[key], sl[key]
        if a is None or b is None or b == 0:
            return f"n/a (ferrodir {a}, slapd {b})"
        r = a / b
        met = r >= target if better_high else r <= target
        return f"{r:.2f}× (target {'≥' if better_high else '≤'} {target}×: {'met' if met else 'missed'})"

    print(f"- write rate ferrodir/slapd: {ratio('rate', 3.0, True)}")
    print(f"- writes on all 3 nodes per second (load + drain) ferrodir/slapd: {ratio('on_all', 3.0, True)}")
    print(f"- lag p99 ferrodir/slapd: {ratio('p99', 1.0, False)}")
    print(f"- catch-up time ferrodir/slapd: {ratio('catchup', 1.0, False)}")


if __name__ == "__main__":
    main(sys.argv[1])
