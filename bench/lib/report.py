#!/usr/bin/env python3
"""Turns bench/run.sh's raw.jsonl (one JSON object per measurement) into results.json
(medians per scenario and server, with every run kept) and results.md (the tables).
Usage: report.py raw.jsonl results.json results.md"""
import json
import statistics
import sys
from collections import defaultdict

SERVERS = ("ferrodir", "slapd", "null")
NA_TOOLS = "n/a (tools not built)"


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def per_op_us(run, key):
    ops = run.get("ops_total", 0)
    return run[key] / ops * 1e6 if ops and key in run else None


def summarize(runs):
    """Median over repetitions; a server that answered any error makes the cell broken."""
    if any("na" in r for r in runs):
        return {"na": runs[0]["na"]}
    summary = {
        "ops_per_s": median([r.get("ops_per_s") for r in runs]),
        "cpu_user_us_per_op": median([per_op_us(r, "cpu_user_s") for r in runs]),
        "cpu_sys_us_per_op": median([per_op_us(r, "cpu_sys_s") for r in runs]),
        "errors": sum(r.get("errors", 0) for r in runs),
        "repetitions": len(runs),
        "runs": runs,
    }
    if any(r.get("dead_threads") for r in runs):
        summary["note"] = "ldclt threads ended early (name range exhausted): a lower bound"
    for stream in ("search_ops_per_s", "modify_ops_per_s"):
        if any(stream in r for r in runs):
            summary[stream] = median([r.get(stream) for r in runs])
    return summary


def collect(records):
    sizes = defaultdict(lambda: {"scenarios": defaultdict(lambda: defaultdict(list)),
                                 "matrix": defaultdict(list), "load": {}, "rss": {},
                                 "fsync": defaultdict(dict), "latency": {}, "checks": []})
    meta = {}
    for r in records:
        kind = r.get("type")
        if kind == "meta":
            meta = r
            continue
        size = sizes[r["size"]]
        if kind == "run":
            size["scenarios"][r["scenario"]][r["server"]].append(r)
        elif kind == "matrix":
            size["matrix"][(r["scenario"], r["threads"], r["pinned"])].append(r)
        elif kind == "load":
            size["load"][r["server"]] = dict(r, bytes_per_entry=r["bytes"] / r["entries"])
        elif kind == "rss":
            size["rss"][r["server"]] = r["vmrss_kb"]
        elif kind == "fsync":
            syncs = r["fsync"] + r["fdatasync"] + r["sync_file_range"] + r["msync"]
            ops = r.get("ops_total", 0)
            size["fsync"][r["scenario"]][r["server"]] = dict(
                r, syncs_per_write=syncs / ops if ops and not r.get("errors") else None)
        elif kind == "latency":
            size["latency"][r["server"]] = r.get("result") or {"na": r.get("na", "no result")}
        elif kind == "check":
            size["checks"].append(r)
    return meta, sizes


def fmt(value, digits=0):
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def cell_ops(summary):
    if summary is None:
        return "–"
    if "na" in summary:
        return NA_TOOLS if "tools" in summary["na"] else summary["na"]
    if summary["errors"]:
        return f"BROKEN ({summary['errors']} errors)"
    text = fmt(summary["ops_per_s"])
    if "search_ops_per_s" in summary:
        text = f"{fmt(summary['search_ops_per_s'])} search + {fmt(summary['modify_ops_per_s'])} mod"
    return text + (" (≥)" if "note" in summary else "")


def cell_cpu(summary):
    if not summary or "na" in summary or summary["errors"]:
        return "–"
    return f"{fmt(summary['cpu_user_us_per_op'], 1)} + {fmt(summary['cpu_sys_us_per_op'], 1)}"


def ratio(a, b, key="ops_per_s"):
    ok = lambda s: s and "na" not in s and not s.get("errors") and s.get(key)
    return f"{a[key] / b[key]:.2f}" if ok(a) and ok(b) else "–"


def scenario_table(size, lines):
    lines += ["| scenario | ferrodir ops/s | slapd ops/s | ferrodir/slapd | null responder ops/s "
              "| ferrodir CPU µs/op (usr + sys) | slapd CPU µs/op (usr + sys) "
              "| ferrodir syncs/write | slapd syncs/write |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    out = {}
    for name, by_server in size["scenarios"].items():
        s = {server: summarize(runs) for server, runs in by_server.items()}
        out[name] = s
        f, l, n = s.get("ferrodir"), s.get("slapd"), s.get("null")
        r = ratio(f, l)
        if "search_ops_per_s" in (f or {}):
            r = f"{ratio(f, l, 'search_ops_per_s')} / {ratio(f, l, 'modify_ops_per_s')}"
        syncs = size["fsync"].get(name, {})
        sync_cell = lambda srv: fmt(syncs.get(srv, {}).get("syncs_per_write"), 2) if srv in syncs else "–"
        lines.append(f"| {name} | {cell_ops(f)} | {cell_ops(l)} | {r} | "
                     f"{cell_ops(n) if n else '–'} | {cell_cpu(f)} | {cell_cpu(l)} | "
                     f"{sync_cell('ferrodir')} | {sync_cell('slapd')} |")
    return out


def server_table(size, lines):
    lines += ["", "| server | load s | bytes on disk / entry | VmRSS after full read MiB "
              "| p50 µs (base) | p99 µs (base) | latency-run ops/s |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for server in SERVERS:
        load, rss, lat = size["load"].get(server, {}), size["rss"].get(server), size["latency"].get(server, {})
        if not (load or rss or lat):
            continue
        if "na" in lat or not lat:
            lat_cells = [NA_TOOLS if "tools" in lat.get("na", "") else "–"] * 3
        elif lat.get("errors"):
            lat_cells = [f"BROKEN ({lat['errors']} errors)"] * 3
        else:
            lat_cells = [fmt(lat.get("p50_us")), fmt(lat.get("p99_us")), fmt(lat.get("ops_per_s"))]
        lines.append(f"| {server} | {fmt(load.get('seconds'), 1)} | {fmt(load.get('bytes_per_entry'))} "
                     f"| {fmt(rss / 1024 if rss else None, 1)} | " + " | ".join(lat_cells) + " |")


def matrix_table(size, lines):
    if not size["matrix"]:
        return {}
    lines += ["", "Matrix (one run each):", "",
              "| scenario | client threads | pinning | ferrodir ops/s | slapd ops/s | ferrodir/slapd | null ops/s |",
              "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    out = []
    for (scenario, threads, pinned), runs in sorted(size["matrix"].items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        by = {r["server"]: summarize([r]) for r in runs}
        out.append({"scenario": scenario, "threads": threads, "pinned": pinned, **by})
        lines.append(f"| {scenario} | {threads} | {pinned} | {cell_ops(by.get('ferrodir'))} | "
                     f"{cell_ops(by.get('slapd'))} | {ratio(by.get('ferrodir'), by.get('slapd'))} | "
                     f"{cell_ops(by.get('null')) if 'null' in by else '–'} |")
    return out


def main():
    raw, json_path, md_path = sys.argv[1:4]
    records = [json.loads(line) for line in open(raw) if line.strip()]
    meta, sizes = collect(records)
    lines = [f"# Ferrodir vs slapd: {meta.get('started', '?')}", "",
             f"`{meta.get('command', '?')}` on {meta.get('host', '?')} ({meta.get('cpus', '?')} CPUs); "
             f"slapd {meta.get('slapd_version', '?')}; medians of {meta.get('reps')} interleaved "
             f"repetitions of {meta.get('samples')} × 10 s; server on CPU 0, ldclt on CPU 1, "
             f"8 client threads; ferrodir shards = {meta.get('shards')}.", ""]
    result = {"meta": meta, "sizes": {}}
    for n in sorted(sizes):
        size = sizes[n]
        lines += [f"## N = {n:,}", ""]
        scenarios = scenario_table(size, lines)
        server_table(size, lines)
        matrix = matrix_table(size, lines)
        for check in size["checks"]:
            lines.append(f"\nCheck: {check['what']}: ferrodir {check['ferrodir']}, slapd {check['slapd']} entries.")
        lines.append("")
        result["sizes"][str(n)] = {"scenarios": scenarios, "load": size["load"], "vmrss_kb": size["rss"],
                                   "fsync": size["fsync"], "latency": size["latency"],
                                   "checks": size["checks"], "matrix": matrix}
    json.dump(result, open(json_path, "w"), indent=1, default=str)
    open(md_path, "w").write("\n".join(lines) + "\n")


main()
