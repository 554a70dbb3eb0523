#!/usr/bin/env python3
"""results.md of bench/login-storm.sh from its raw.jsonl: per password set, ferrodir's and
slapd's logins/s (median over rounds), the median of the rounds' ferrodir/slapd ratios,
per-login p50/p99 (medians over rounds), the four steps' p50, failures by result code and
the server's CPU per login; then the argon2 capacity table (ferrodir only).

Usage: login_report.py raw.jsonl > results.md
"""
import json
import statistics
import sys
from collections import defaultdict



def schemes(meta):
    m, t, p = meta.get("argon2_set", "19456:2:1").split(":")
    return {"ssha": "{SSHA}", "pbkdf2": f"{{PBKDF2-SHA512}} ({int(meta.get('pbkdf2_rounds', 210000)):,} rounds)",
            "argon2": f"{{ARGON2}} (argon2id m={m} KiB, t={t}, p={p})"}


def med(values):
    return statistics.median(values) if values else float("nan")


def main():
    meta, runs, unsupported = {}, defaultdict(list), {}
    with open(sys.argv[1]) as f:
        for line in f:
            r = json.loads(line)
            if r["type"] == "meta":
                meta = r
            elif r["type"] == "run":
                runs[(r["set"], r["server"])].append(r)
            elif r["type"] == "unsupported":
                unsupported[r["set"]] = r["why"]
    SCHEMES = schemes(meta)
    out = []
    out.append(f"# Login storm: {meta.get('command', '')}\n")
    out.append(f"{meta.get('started')} on {meta.get('host')} ({meta.get('cpus')} CPUs, "
               f"{meta.get('cpu_model')}; load {meta.get('load')}), ferrodir {meta.get('ferrodir_commit')}, "
               f"slapd {meta.get('slapd_version')}. {meta.get('size')} users, slow sets draw from "
               f"{meta.get('slow_users')}; {meta.get('workers')} workers; {meta.get('reps')} rounds of "
               f"{meta.get('duration_s')} s; servers on CPUs {meta.get('server_cpus')}, client on "
               f"{meta.get('client_cpus')}; ferrodir {meta.get('shards')} shards, hash pool nice "
               f"{meta.get('hash_nice', 'not recorded')}.\n")
    sets = [s for s in ("ssha", "pbkdf2", "argon2") if (s, "ferrodir") in runs]
    if sets:
        out.append("| users' passwords | server | logins/s | ferrodir/slapd | p50 ms | p99 ms | "
                   "steps p50 µs (find, bind, groups, memberOf) | groups/login | server CPU ms/login | failures |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
    for s in sets:
        fd = {r["rep"]: r for r in runs[(s, "ferrodir")]}
        sl = {r["rep"]: r for r in runs.get((s, "slapd"), [])}
        ratios = [fd[k]["result"]["logins_per_s"] / sl[k]["result"]["logins_per_s"]
                  for k in fd if k in sl and sl[k]["result"]["logins_per_s"] > 0]
        for server, rs in (("ferrodir", list(fd.values())), ("slapd", list(sl.values()))):
            if not rs:
                out.append(f"| {SCHEMES[s]} | slapd | not measured: {unsupported.get(s, '?')} | | | | | | | |")
                continue
            res = [r["result"] for r in rs]
            cpu = [(r["cpu_user_s"] + r["cpu_sys_s"]) * 1000 / max(1, r["result"]["logins"]) for r in rs]
            steps = [round(med([x["step_p50_us"][i] for x in res])) for i in range(4)]
            failures = defaultdict(int)
            for x in res:
                for k, v in x["failures_by_code"].items():
                    failures[k] += v
            ratio = f"{med(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)})" if server == "ferrodir" and ratios else ""
            out.append(f"| {SCHEMES[s]} | {server} | {med([x['logins_per_s'] for x in res]):,.1f} | {ratio} | "
                       f"{med([x['p50_us'] for x in res]) / 1000:.2f} | {med([x['p99_us'] for x in res]) / 1000:.2f} | "
                       f"{', '.join(map(str, steps))} | {med([x['groups_per_login'] for x in res]):.2f} | "
                       f"{med(cpu):.3f} | {sum(failures.values())}{' ' + dict(failures).__repr__() if failures else ''} |")
    caps = [k for k in runs if k[0].startswith("cap-")]
    if caps:
        out.append("\nArgon2 capacity, ferrodir only (logins/s on the server's CPUs; CPU ms per login "
                   "from the server's utime+stime):\n")
        out.append("| argon2id m KiB, t, p | logins/s | logins per CPU-second | p50 ms | p99 ms | bind p50 ms | server CPU ms/login | failures |")
        out.append("|---|---|---|---|---|---|---|---|")
        for key in caps:
            rs = runs[key]
            res = [r["result"] for r in rs]
            cpu_s = [r["cpu_user_s"] + r["cpu_sys_s"] for r in rs]
            per_cpu = [x["logins"] / c for x, c in zip(res, cpu_s) if c > 0]
            m, t, p = key[0][4:].split(":")
            out.append(f"| {m}, {t}, {p} | {med([x['logins_per_s'] for x in res]):,.1f} | {med(per_cpu):,.1f} | "
                       f"{med([x['p50_us'] for x in res]) / 1000:.1f} | {med([x['p99_us'] for x in res]) / 1000:.1f} | "
                       f"{med([x['step_p50_us'][1] for x in res]) / 1000:.1f} | "
                       f"{med([c * 1000 / max(1, x['logins']) for x, c in zip(res, cpu_s)]):.1f} | "
                       f"{sum(x['failures'] for x in res)} |")
    print("\n".join(out))


main()
