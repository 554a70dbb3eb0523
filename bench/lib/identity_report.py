#!/usr/bin/env python3
"""bench/identity.sh's raw.jsonl -> the Markdown tables of docs/BENCHMARKS.md, "Identity
store (issue #24)": medians per scenario and server, and the issue's same-run ratios with
their targets. A ratio is taken per repetition (the two runs were minutes apart at most),
then the median of those is given with the lowest and highest.
Usage: identity_report.py raw.jsonl > results.md"""
import json
import statistics
import sys
from collections import defaultdict

# (scenario, numerator, denominator, target, what): target None = recorded, no target.
RATIOS = [
    ("bind", "ferrodir", "slapd", 2.0, "binds of {SSHA} users, policy in force"),
    ("bind-fail", "ferrodir", "slapd", 2.0, "failed binds (wrong password)"),
    ("bind-fail", "ferrodir-ssha", "slapd", 2.0, "failed binds, ferrodir with password_scheme {SSHA512}"),
    ("add", "ferrodir", "slapd", 3.0, "adds, uniqueness on uid and mail"),
    ("add", "ferrodir", "ferrodir-plain", None, "adds with [[unique]] / without (its cost)"),
    ("modify", "ferrodir-audit", "ferrodir-plain", 0.8, "modify with the audit log (and changelog) on / both off"),
]
DESCRIBE = {
    "ferrodir": "ferrodir (ppolicy, [[unique]] uid+mail, scheme {ARGON2})",
    "ferrodir-ssha": "ferrodir, password_scheme {SSHA512}",
    "ferrodir-plain": "ferrodir without [[unique]], no audit",
    "ferrodir-audit": "ferrodir with [audit_log]",
    "slapd": "slapd 2.5 mdb + ppolicy + unique",
}


def fmt(value, digits=0):
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if digits else f"{value:,.0f}"


def cpu_per_op(runs):
    """The server's CPU (user + system) per operation, median over the runs; None if none."""
    values = [(r["cpu_user_s"] + r["cpu_sys_s"]) / r["ops_total"] * 1e6
              for r in runs if r.get("ops_total") and "cpu_user_s" in r]
    return statistics.median(values) if values else None


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    meta = next((r for r in rows if r.get("type") == "meta"), {})
    evidence = next((r for r in rows if r.get("type") == "evidence"), {})
    runs = defaultdict(list)  # (scenario, server) -> runs in repetition order
    for r in rows:
        if r.get("type") == "run":
            runs[(r["scenario"], r["server"])].append(r)
    describe = dict(DESCRIBE)
    if meta.get("ferrodir_ppolicy") == "off":
        describe["ferrodir"] = describe["ferrodir"].replace("ppolicy", "NO ppolicy (key refused)")
    describe["ferrodir-audit"] += " and [changelog]" if meta.get("ferrodir_changelog") == "on" \
        else " only ([changelog] refused by this build)"

    out = []
    out.append(f"Command: `{meta.get('command', '?')}`; started {meta.get('started', '?')} on "
               f"{meta.get('host', '?')} ({meta.get('cpus', '?')} CPUs, load {meta.get('load', '?')}); "
               f"ferrodir {meta.get('ferrodir_commit', '?')}, slapd {meta.get('slapd_version', '?')}; "
               f"{meta.get('size', '?')} users, {meta.get('reps', '?')} repetitions of "
               f"{meta.get('samples', '?')} x 10 s, {meta.get('threads', '?')} ldclt threads; "
               f"ferrodir ppolicy {meta.get('ferrodir_ppolicy', '?')}, changelog "
               f"{meta.get('ferrodir_changelog', '?')}.")
    out.append("")
    out.append("| scenario | server | ops/s (median) | per repetition | server CPU µs/op | errors |")
    out.append("|---|---|---:|---|---:|---:|")
    medians = {}
    for (sc, server), rs in runs.items():
        rates = [r.get("ops_per_s", 0) for r in rs]
        cpu = cpu_per_op(rs)
        errors = sum(r.get("errors", 0) for r in rs)
        medians[(sc, server)] = statistics.median(rates)
        out.append(f"| {sc} | {describe.get(server, server)} | {fmt(statistics.median(rates))} | "
                   f"{' / '.join(fmt(x) for x in rates)} | "
                   f"{fmt(cpu)} | {errors} |")
    out.append("")
    out.append("| ratio (same run) | ops/s: median | lowest-highest | target | met | server CPU µs/op: num / den |")
    out.append("|---|---:|---|---:|---|---:|")
    for sc, num, den, target, what in RATIOS:
        if meta.get("ferrodir_ppolicy") == "off":
            what = what.replace("policy in force", "policy in force on slapd only")
            if sc == "bind-fail":
                what += " (slapd records each failure, ferrodir has no policy)"
        if meta.get("ferrodir_changelog") == "off":
            what = what.replace(" (and changelog)", "")
        a, b = runs.get((sc, num)), runs.get((sc, den))
        if not a or not b:
            continue
        per_rep = [x.get("ops_per_s", 0) / y["ops_per_s"] for x, y in zip(a, b) if y.get("ops_per_s")]
        if not per_rep:
            continue
        ratio = statistics.median(per_rep)
        met = "-" if target is None else ("yes" if ratio >= target else "**no**")
        broken = any(r.get("errors") for r in a + b)
        cpu = [cpu_per_op(a), cpu_per_op(b)]
        cpu_cell = f"{fmt(cpu[0])} / {fmt(cpu[1])} = {cpu[0] / cpu[1]:.2f}" if all(cpu) else "-"
        out.append(f"| {what}: {num} / {den} | {ratio:.2f}x{' (errors!)' if broken else ''} | "
                   f"{min(per_rep):.2f}-{max(per_rep):.2f} | {'-' if target is None else f'>= {target}x'} | "
                   f"{met} | {cpu_cell} |")
    out.append("")
    if evidence:
        out.append(f"Evidence after the runs: pwdFailureTime values on user00001..10: "
                   f"{evidence.get('pwd_failure_times_on_10_users')}; audit log records: "
                   f"{evidence.get('audit_records')}; changelog lastChangeNumber: "
                   f"{evidence.get('changelog_last_change_number')}.")
    print("\n".join(out))


main()
