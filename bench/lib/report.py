#!/usr/bin/env python3
"""Turns bench/run.sh's raw.jsonl (one JSON object per measurement) into results.json
(medians per scenario and server, with every run kept) and results.md (the tables).
Usage: report.py raw.jsonl results.json results.md"""
import json
import statistics
import sys
from collections import defaultdict

SERVERS = ("ferrodir", "slapd", "null", "ferrodir-k")
FANOUT_TARGET = 1.3   # CPU per op with --compare-shards K over CPU per op with --shards
NA_TOOLS = "n/a (tools not built)"


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def per_op_us(run, key):
    ops = run.get("ops_total", 0)
    return run[key] / ops * 1e6 if ops and key in run else None


def client_us_per_op(run):
    """ldclt's own CPU (user + system) per operation, when the run recorded it."""
    ops = run.get("ops_total", 0)
    if not ops or "client_cpu_user_s" not in run:
        return None
    return (run["client_cpu_user_s"] + run.get("client_cpu_sys_s", 0)) / ops * 1e6


def server_us_per_op(run):
    ops = run.get("ops_total", 0)
    if not ops or "cpu_user_s" not in run:
        return None
    return (run["cpu_user_s"] + run.get("cpu_sys_s", 0)) / ops * 1e6


def summarize(runs):
    """Median over repetitions; a server that answered any error makes the cell broken."""
    if any("na" in r for r in runs):
        return {"na": runs[0]["na"]}
    summary = {
        "ops_per_s": median([r.get("ops_per_s") for r in runs]),
        "cpu_user_us_per_op": median([per_op_us(r, "cpu_user_s") for r in runs]),
        "cpu_sys_us_per_op": median([per_op_us(r, "cpu_sys_s") for r in runs]),
        "client_cpu_us_per_op": median([client_us_per_op(r) for r in runs]),
        "server_cpu_us_per_op": median([server_us_per_op(r) for r in runs]),
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
                                 "fsync": defaultdict(dict), "latency": {}, "checks": [],
                                 "isolation": [], "isolation_stop": [], "tls": [], "issue11": []})
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
            if r.get("rssanon_kb") is not None:
                size.setdefault("rssanon", {})[r["server"]] = r["rssanon_kb"]
        elif kind == "rss-end":
            size.setdefault("rss_end", {})[r["server"]] = r["vmrss_kb"]
        elif kind == "fsync":
            syncs = r["fsync"] + r["fdatasync"] + r["sync_file_range"] + r["msync"]
            ops = r.get("ops_total", 0)
            size["fsync"][r["scenario"]][r["server"]] = dict(
                r, syncs_per_write=syncs / ops if ops and not r.get("errors") else None)
        elif kind == "latency":
            size["latency"][r["server"]] = r.get("result") or {"na": r.get("na", "no result")}
        elif kind == "check":
            size["checks"].append(r)
        elif kind == "isolation":
            size["isolation"].append(r)
        elif kind == "isolation_stop":
            size["isolation_stop"].append(r)
        elif kind == "tls":
            size["tls"].append(r)
        elif kind == "issue11":
            size["issue11"].append(r)
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
    if not size["scenarios"]:
        return {}
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


def fanout_table(size, meta, lines):
    """--compare-shards: the same searches on K shards against --shards, one CPU."""
    rows = {name: by for name, by in size["scenarios"].items() if "ferrodir-k" in by and "ferrodir" in by}
    if not rows:
        return {}
    k, base = meta.get("compare_shards"), meta.get("shards")
    lines += ["", f"Fan-out: the same data on {k} shards against {base}, server on the same one CPU "
              f"(issue #14, item 7; target: CPU per operation at {k} shards ≤ {FANOUT_TARGET}× that at {base}).", "",
              f"| scenario | {base} shards ops/s | {k} shards ops/s | rate {k}/{base} | CPU µs/op {base} shards "
              f"| CPU µs/op {k} shards | CPU {k}/{base} | target |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    out = {}
    for name, by in rows.items():
        a, b = summarize(by["ferrodir"]), summarize(by["ferrodir-k"])
        cpu = lambda s: (s["cpu_user_us_per_op"] or 0) + (s["cpu_sys_us_per_op"] or 0) if s and "na" not in s else None
        ca, cb = cpu(a), cpu(b)
        factor = cb / ca if ca and cb else None
        verdict = "–" if factor is None else ("met" if factor <= FANOUT_TARGET else "missed")
        out[name] = {"cpu_factor": factor, "rate_factor": (b["ops_per_s"] / a["ops_per_s"]) if a.get("ops_per_s") and b.get("ops_per_s") else None}
        lines.append(f"| {name} | {cell_ops(a)} | {cell_ops(b)} | {ratio(b, a)} | {fmt(ca, 1)} | {fmt(cb, 1)} "
                     f"| {fmt(factor, 2)} | {verdict} |")
    return out


def server_table(size, lines):
    lines += ["", "| server | load s | bytes on disk / entry | VmRSS after full read MiB "
              "| VmRSS bytes / entry | RssAnon MiB | VmRSS after the runs MiB "
              "| p50 µs (base) | p99 µs (base) | latency-run ops/s |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
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
        anon = size.get("rssanon", {}).get(server)
        end = size.get("rss_end", {}).get(server)
        per_entry = rss * 1024 / load["entries"] if rss and load.get("entries") else None
        lines.append(f"| {server} | {fmt(load.get('seconds'), 1)} | {fmt(load.get('bytes_per_entry'))} "
                     f"| {fmt(rss / 1024 if rss else None, 1)} | {fmt(per_entry)} "
                     f"| {fmt(anon / 1024 if anon else None, 1)} "
                     f"| {fmt(end / 1024 if end else None, 1)} | " + " | ".join(lat_cells) + " |")


def cell_cpu(summary):
    """Server + client CPU µs per operation: what one operation costs a machine the two share."""
    if not summary or "na" in summary:
        return "–"
    server, client = summary.get("server_cpu_us_per_op"), summary.get("client_cpu_us_per_op")
    if server is None:
        return "–"
    return f"{server:.1f} + {client:.1f}" if client is not None else f"{server:.1f}"


def matrix_table(size, lines):
    if not size["matrix"]:
        return {}
    reps = max(sum(1 for r in runs if r["server"] == "ferrodir") for runs in size["matrix"].values()) or 1
    title = "Matrix (one run each):" if reps == 1 else f"Matrix (medians of {reps} interleaved runs):"
    lines += ["", title, "",
              "| scenario | client threads | pinning | ferrodir ops/s | slapd ops/s | ferrodir/slapd | null ops/s "
              "| CPU µs/op, server + client: ferrodir · slapd · null |",
              "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- |"]
    out = []
    for (scenario, threads, pinned), runs in sorted(size["matrix"].items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        per_server = defaultdict(list)
        for r in runs:
            per_server[r["server"]].append(r)
        by = {server: summarize(rs) for server, rs in per_server.items()}
        out.append({"scenario": scenario, "threads": threads, "pinned": pinned, **by})
        lines.append(f"| {scenario} | {threads} | {pinned} | {cell_ops(by.get('ferrodir'))} | "
                     f"{cell_ops(by.get('slapd'))} | {ratio(by.get('ferrodir'), by.get('slapd'))} | "
                     f"{cell_ops(by.get('null')) if 'null' in by else '–'} | "
                     f"{' · '.join(cell_cpu(by.get(s)) for s in ('ferrodir', 'slapd', 'null'))} |")
    return out


# --- isolation (issue #9) ----------------------------------------------------------------
ISO_FLOOR_MS = 20.0       # ferrodir p99 <= max(2 x slapd p99, 20 ms)
ISO_PIPELINED_MS = 10.0   # 1 connection x 16 scans: the other client's lookup p99 <= 10 ms
ISO_STOP_MS = 10.0        # every shard's part stops within 10 ms (p99)
ISO_PHASE_NAMES = {"4x1": "4 scanners", "16x1": "16 scanners", "1x16": "1 connection × 16 scans"}


def iso_summary(runs):
    """Medians over repetitions of one phase on one server."""
    results = [r.get("result") or {} for r in runs]
    ms = lambda key: median([x[key] / 1000 if x.get(key) is not None else None for x in results])
    total = lambda key: sum(x.get(key) or 0 for x in results)
    return {"repetitions": len(runs), "scans_per_s": median([x.get("scans_per_s") for x in results]),
            "lookup_p50_ms": ms("lookup_p50_us"), "lookup_p99_ms": ms("lookup_p99_us"),
            "lookup_max_ms": ms("lookup_max_us"), "modify_p50_ms": ms("modify_p50_us"),
            "modify_p99_ms": ms("modify_p99_us"), "modify_max_ms": ms("modify_max_us"),
            "scan_p50_ms": ms("scan_p50_us"),
            "lookups": total("lookups"), "modifies": total("modifies"), "scans": total("scans"),
            "unfinished": total("lookup_unfinished") + total("modify_unfinished"),
            "errors": total("errors") + sum(1 for x in results if not x),
            "first_error": next((x.get("first_error") for x in results if x.get("first_error")), None),
            "drain_s": median([r.get("drain_s") for r in runs]),
            "cpu_s": median([(r.get("cpu_user_s") or 0) + (r.get("cpu_sys_s") or 0) for r in runs])}


def iso_check(phase, f, l):
    """The issue's targets for ferrodir's row, against slapd's row of the same phase."""
    failures = []
    if f["errors"]:
        failures.append(f"{f['errors']} errors")
    if phase == "1x16":
        if f["lookup_p99_ms"] is None:
            failures.append("no lookups")
        elif f["lookup_p99_ms"] > ISO_PIPELINED_MS:
            failures.append(f"lookup p99 {f['lookup_p99_ms']:.1f} > {ISO_PIPELINED_MS:.0f} ms")
    else:
        for what in ("lookup", "modify"):
            mine, theirs = f[f"{what}_p99_ms"], (l or {}).get(f"{what}_p99_ms")
            if mine is None:
                failures.append(f"no {what}s")
                continue
            bound = max(2 * theirs, ISO_FLOOR_MS) if theirs is not None else ISO_FLOOR_MS
            if mine > bound:
                failures.append(f"{what} p99 {mine:.1f} > {bound:.1f} ms")
        mine, theirs = f["scans_per_s"], (l or {}).get("scans_per_s")
        if mine is None or theirs is None:
            failures.append("no scan rate")
        elif mine < theirs:
            failures.append(f"scans/s {mine / theirs:.2f}× slapd" if theirs else "no scans")
    return "pass" if not failures else "FAIL: " + "; ".join(failures)


def isolation_table(size, lines):
    runs, stops = size["isolation"], size["isolation_stop"]
    if not runs and not stops:
        return {}
    lines += ["", "Isolation (issue #9): unindexed scans `(description=nomatch)` from anonymous "
              "connections, and one probe connection (rootDN) doing base lookups and durable "
              "modifies; medians over repetitions. Targets: ferrodir's lookup and modify p99 ≤ "
              "max(2 × slapd's, 20 ms) and scans/s ≥ slapd's with 4 and 16 scanners; lookup p99 ≤ "
              "10 ms with 1 connection × 16 scans; every stopped search part stops within 10 ms (p99).", ""]
    if any("na" in r for r in runs):
        lines.append(f"Isolation: {NA_TOOLS}")
        return {"na": NA_TOOLS}
    by = defaultdict(lambda: defaultdict(list))
    for r in runs:
        by[r["phase"]][r["server"]].append(r)
    lines += ["| phase | server | scans/s | lookup p50 / p99 / max ms | modify p50 / p99 / max ms "
              "| lookups / modifies / scans | errors | server CPU s | drain s | target |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    out = {}
    order = list(ISO_PHASE_NAMES) + sorted(set(by) - set(ISO_PHASE_NAMES))
    for phase in [p for p in order if p in by]:
        summaries = {server: iso_summary(rs) for server, rs in by[phase].items()}
        out[phase] = summaries
        for server in ("ferrodir", "slapd"):
            x = summaries.get(server)
            if not x:
                continue
            if server == "ferrodir":
                target = iso_check(phase, x, summaries.get("slapd"))
                x["target"] = target
            else:
                target = "(reference)"
            triple = lambda w: (f"{fmt(x[w + '_p50_ms'], 1)} / {fmt(x[w + '_p99_ms'], 1)} / "
                                f"{fmt(x[w + '_max_ms'], 1)}")
            unfinished = f" ({x['unfinished']} unanswered at the end)" if x["unfinished"] else ""
            lines.append(f"| {ISO_PHASE_NAMES.get(phase, phase)} | {server} | {fmt(x['scans_per_s'], 2)} | "
                         f"{triple('lookup')} | {triple('modify')}{unfinished} | "
                         f"{x['lookups']} / {x['modifies']} / {x['scans']} | {x['errors']} | "
                         f"{fmt(x['cpu_s'], 1)} | {fmt(x['drain_s'], 1)} | {target} |")
    for stop in stops:
        result, found = stop.get("result") or {}, stop.get("stop_lines") or {}
        out["stop"] = stop
        lines += ["", f"Stop run (ferrodir; slapd's stop latency cannot be observed: n/a): one full "
                  f"scan takes {fmt(result.get('full_scan_ms'), 1)} ms alone.", "",
                  "| stop | sent while the scan ran (client) | server stop lines | p50 ms | p99 ms | max ms | target p99 ≤ 10 ms |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        client = {"abandon": result.get("abandon", {}), "close": result.get("close", {}),
                  "size_limit": result.get("size_limit", {}), "time_limit": result.get("time_limit", {})}

        def sent(c):
            if "skipped" in c:
                return "skipped (" + c["skipped"] + ")"
            if "stopped" in c:
                return f"{c.get('stopped', 0)} of {c.get('attempts', 0)} ({c.get('errors', 0)} errors)"
            return (f"{c.get('limited', 0)} of {c.get('attempts', 0)} limited, client p99 "
                    f"{fmt((c.get('client_p99_us') or 0) / 1000, 1)} ms")

        reasons = found.get("by_reason", {})
        if not found.get("lines"):
            for kind, c in client.items():
                lines.append(f"| {kind} | {sent(c)} | 0 | – | – | – | n/a (no stop lines found) |")
        else:
            # The server names the reasons; the client's kinds are listed beside the best match.
            def kind_of(reason):
                r = reason.lower()
                for kind, words in (("abandon", ("abandon",)), ("close", ("clos", "disconnect", "conn")),
                                    ("size_limit", ("size",)), ("time_limit", ("time",))):
                    if any(w in r for w in words):
                        return kind
                return None
            shown = set()
            for reason, st in reasons.items():
                kind = kind_of(reason)
                shown.add(kind)
                ok = "pass" if st["p99_us"] / 1000 <= ISO_STOP_MS else f"FAIL: {st['p99_us'] / 1000:.1f} ms"
                lines.append(f"| {reason} | {sent(client[kind]) if kind else '–'} | {st['n']} | "
                             f"{fmt(st['p50_us'] / 1000, 2)} | {fmt(st['p99_us'] / 1000, 2)} | "
                             f"{fmt(st['max_us'] / 1000, 2)} | {ok} |")
            for kind, c in client.items():
                if kind not in shown:
                    lines.append(f"| {kind} | {sent(c)} | 0 | – | – | – | no stop lines for it |")
            a = found["all"]
            ok = "pass" if a["p99_us"] / 1000 <= ISO_STOP_MS else f"FAIL: {a['p99_us'] / 1000:.1f} ms"
            lines.append(f"| all | | {a['n']} | {fmt(a['p50_us'] / 1000, 2)} | {fmt(a['p99_us'] / 1000, 2)} | "
                         f"{fmt(a['max_us'] / 1000, 2)} | {ok} |")
    return out


# --- TLS (issue #10) ----------------------------------------------------------------------
TLS_TARGETS = {"lookup": 1.5, "bind": 1.0}   # ferrodir/slapd, same run
TLS_MEASURE_NAMES = {
    "lookup": "base lookups, established LDAPS connections",
    "bind": "bind on a new LDAPS connection",
    "starttls-bind": "bind on a new connection with StartTLS",
    "plain-lookup": "base lookups, plain LDAP (reference)",
    "plain-bind": "bind on a new plain connection (reference)",
}


def tls_summary(runs):
    results = [r.get("result") or {} for r in runs]
    ops = lambda r: (r.get("result") or {}).get("ops") or 0
    per_op = lambda r, key: r[key] / ops(r) * 1e6 if ops(r) and r.get(key) is not None else None
    client = lambda r: ((r.get("result") or {}).get("client_cpu_s") or 0) / ops(r) * 1e6 if ops(r) else None
    return {"repetitions": len(runs), "ops_per_s": median([x.get("ops_per_s") for x in results]),
            "p50_us": median([x.get("p50_us") for x in results]),
            "p99_us": median([x.get("p99_us") for x in results]),
            "cpu_user_us_per_op": median([per_op(r, "cpu_user_s") for r in runs]),
            "cpu_sys_us_per_op": median([per_op(r, "cpu_sys_s") for r in runs]),
            "client_cpu_us_per_op": median([client(r) for r in runs]),
            "errors": sum(x.get("errors", 0) for x in results) + sum(1 for x in results if not x),
            "tls": next((x["tls"] for x in results if x.get("tls")), None),
            "runs": runs}


def tls_table(size, lines):
    runs = size["tls"]
    if not runs:
        return {}
    lines += ["", "TLS (issue #10): `ldap-latency` (rustls, one tokio thread, CPU 1) against both "
              "servers, same certificate and key, full handshakes (no resumption); medians over "
              "repetitions. Targets: lookups over TLS ≥ 1.5× slapd, bind on a new TLS connection "
              "≥ 1.0× slapd.", ""]
    if any("na" in r for r in runs):
        lines.append(f"TLS: {NA_TOOLS}")
        return {"na": NA_TOOLS}
    by = defaultdict(lambda: defaultdict(list))
    for r in runs:
        by[(r["key"], r["measure"])][r["server"]].append(r)
    lines += ["| certificate | measure | ferrodir ops/s | slapd ops/s | ferrodir/slapd "
              "| ferrodir p50 / p99 µs | slapd p50 / p99 µs | ferrodir CPU µs/op (usr + sys) "
              "| slapd CPU µs/op (usr + sys) | client CPU µs/op (vs ferrodir / slapd) | target |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    out, negotiated = {}, {}
    order = list(TLS_MEASURE_NAMES)
    keys = list(dict.fromkeys(r["key"] for r in runs))
    for key in keys:
        for measure in sorted({m for k, m in by if k == key}, key=lambda m: order.index(m) if m in order else 99):
            s = {server: tls_summary(rs) for server, rs in by[(key, measure)].items()}
            out[f"{key}/{measure}"] = s
            f, l = s.get("ferrodir"), s.get("slapd")
            ok = lambda x: x and not x["errors"] and x["ops_per_s"]
            cell = lambda x: "–" if not x else (f"BROKEN ({x['errors']} errors)" if x["errors"] else fmt(x["ops_per_s"]))
            lat = lambda x: "–" if not ok(x) else f"{fmt(x['p50_us'])} / {fmt(x['p99_us'])}"
            cpu = lambda x: "–" if not ok(x) else f"{fmt(x['cpu_user_us_per_op'], 1)} + {fmt(x['cpu_sys_us_per_op'], 1)}"
            ratio_value = f["ops_per_s"] / l["ops_per_s"] if ok(f) and ok(l) else None
            target = "(reference)" if measure.startswith("plain") else "–"
            if measure in TLS_TARGETS:
                want = TLS_TARGETS[measure]
                target = ("–" if ratio_value is None else
                          ("met" if ratio_value >= want else f"**missed** ({ratio_value:.2f} < {want:.1f})"))
            if f and l:
                s["ratio"] = ratio_value
                s["target"] = target
            client = f"{fmt((f or {}).get('client_cpu_us_per_op'), 1)} / {fmt((l or {}).get('client_cpu_us_per_op'), 1)}"
            lines.append(f"| {key} | {TLS_MEASURE_NAMES.get(measure, measure)} | {cell(f)} | {cell(l)} | "
                         f"{fmt(ratio_value, 2) if ratio_value is not None else '–'} | {lat(f)} | {lat(l)} | "
                         f"{cpu(f)} | {cpu(l)} | {client} | {target} |")
            for server in ("ferrodir", "slapd"):
                x = s.get(server) or {}
                if x.get("tls"):
                    negotiated.setdefault((key, server), x["tls"])
    if negotiated:
        lines += ["", "Negotiated: " + "; ".join(f"{server} ({key}): {t}" for (key, server), t in negotiated.items()) + "."]
    return out


# --- paged results, sort, memberOf (issue #11) ---------------------------------------------
ISSUE11_TARGET = 1.5   # ferrodir/slapd, same run
ISSUE11_NAMES = {
    "paged": "paged: ou=people subtree, pages of 1,000, 1 connection",
    "sorted": "sorted: 1,000 entries by cn",
    "memberof": "memberof: (memberOf=<1,000-member group>)",
}


def issue11_summary(runs):
    if any("na" in r for r in runs):
        return {"na": next(r["na"] for r in runs if "na" in r)}
    results = [r.get("result") or {} for r in runs]
    ops = lambda r: (r.get("result") or {}).get("ops") or 0
    per_op_ms = lambda r, f: f(r) / ops(r) * 1e3 if ops(r) else None
    server_cpu = lambda r: (r.get("cpu_user_s") or 0) + (r.get("cpu_sys_s") or 0)
    client_cpu = lambda r: (r.get("result") or {}).get("client_cpu_s") or 0
    return {"repetitions": len(runs), "connections": runs[0].get("connections"),
            "ops_per_s": median([x.get("ops_per_s") for x in results]),
            "entries_per_s": median([x.get("entries_per_s") for x in results]),
            "p50_ms": median([x["p50_us"] / 1000 if x.get("p50_us") else None for x in results]),
            "p99_ms": median([x["p99_us"] / 1000 if x.get("p99_us") else None for x in results]),
            "page_p50_ms": median([x["page_p50_us"] / 1000 if x.get("page_p50_us") else None for x in results]),
            "server_cpu_ms_per_op": median([per_op_ms(r, server_cpu) for r in runs]),
            "client_cpu_ms_per_op": median([per_op_ms(r, client_cpu) for r in runs]),
            "errors": sum(x.get("errors", 0) for x in results) + sum(1 for x in results if not x),
            "first_error": next((x["first_error"] for x in results if x.get("first_error")), None),
            "runs": runs}


def issue11_table(size, lines):
    runs = size["issue11"]
    if not runs:
        return {}
    lines += ["", "Issue #11: `ldap-search-load` (bench/tools, one tokio thread on CPU 1) against both "
              "servers, bound as the rootDN, controls critical, all user attributes returned; "
              "medians over repetitions. paged: entries/s and seconds per full pass; sorted and "
              "memberof: searches/s. Target: ferrodir ≥ 1.5× slapd.", ""]
    if any(r.get("na") == "tools not built" for r in runs):
        lines.append(f"Issue #11: {NA_TOOLS}")
        return {"na": NA_TOOLS}
    by = defaultdict(lambda: defaultdict(list))
    for r in runs:
        by[(r["scenario"], r["measure"])][r["server"]].append(r)
    lines += ["| scenario | measure | ferrodir | slapd | ferrodir/slapd | ferrodir p50 / p99 ms "
              "| slapd p50 / p99 ms | ferrodir CPU ms/op | slapd CPU ms/op | client CPU ms/op (vs ferrodir / slapd) | target |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    out = {}
    order = [(sc, m) for sc in ISSUE11_NAMES for m in ("load", "latency")]
    for key in sorted(by, key=lambda k: order.index(k) if k in order else 99):
        scenario, measure = key
        s = {server: issue11_summary(rs) for server, rs in by[key].items()}
        out[f"{scenario}/{measure}"] = s
        f, l = s.get("ferrodir"), s.get("slapd")
        ok = lambda x: x and "na" not in x and not x["errors"] and x["ops_per_s"]
        metric = "entries_per_s" if scenario == "paged" else "ops_per_s"

        def cell(x):
            if not x:
                return "–"
            if "na" in x:
                return x["na"]
            if x["errors"]:
                return f"BROKEN ({x['errors']} errors: {x['first_error']})"
            if scenario == "paged":
                return f"{fmt(x['entries_per_s'])} entries/s ({fmt(1 / x['ops_per_s'], 2)} s/pass)"
            return f"{fmt(x['ops_per_s'], 1)} searches/s"
        lat = lambda x: "–" if not ok(x) else f"{fmt(x['p50_ms'], 2)} / {fmt(x['p99_ms'], 2)}"
        cpu = lambda x: "–" if not ok(x) else fmt(x["server_cpu_ms_per_op"], 2)
        value = f[metric] / l[metric] if ok(f) and ok(l) else None
        target = "–" if value is None else ("met" if value >= ISSUE11_TARGET else
                                            f"**missed** ({value:.2f} < {ISSUE11_TARGET})")
        s["ratio"], s["target"] = value, target
        conns = (f or l or {}).get("connections") or (l or {}).get("connections")
        client = f"{fmt((f or {}).get('client_cpu_ms_per_op'), 2)} / {fmt((l or {}).get('client_cpu_ms_per_op'), 2)}"
        lines.append(f"| {ISSUE11_NAMES.get(scenario, scenario)} | {measure}"
                     f"{f' ({conns} conn.)' if conns else ''} | {cell(f)} | {cell(l)} | "
                     f"{fmt(value, 2) if value is not None else '–'} | {lat(f)} | {lat(l)} | "
                     f"{cpu(f)} | {cpu(l)} | {client} | {target} |")
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
        fanout = fanout_table(size, meta, lines)
        server_table(size, lines)
        matrix = matrix_table(size, lines)
        isolation = isolation_table(size, lines)
        tls = tls_table(size, lines)
        issue11 = issue11_table(size, lines)
        for check in size["checks"]:
            verdicts = (f" (expected {check['expected']}; ferrodir: {check['ferrodir_verdict']}, "
                        f"slapd: {check['slapd_verdict']})" if "ferrodir_verdict" in check else "")
            lines.append(f"\nCheck: {check['what']}: ferrodir {check['ferrodir']}, slapd {check['slapd']} entries{verdicts}.")
        lines.append("")
        result["sizes"][str(n)] = {"scenarios": scenarios, "load": size["load"], "vmrss_kb": size["rss"],
                                   "fsync": size["fsync"], "latency": size["latency"],
                                   "checks": size["checks"], "matrix": matrix, "isolation": isolation,
                                   "tls": tls, "issue11": issue11, "fanout": fanout}
    json.dump(result, open(json_path, "w"), indent=1, default=str)
    open(md_path, "w").write("\n".join(lines) + "\n")


main()
