#!/usr/bin/env python3
"""Checks deploy/grafana/ferrodir.json against what the real server exports.

Usage: FERRODIR_BIN=target/debug/ferrodir tests/deploy/dashboard.py

1. The dashboard's shape: a Prometheus data source variable that every panel and query
   uses, unique panel ids, panels that don't overlap.
2. A negative control: the PromQL reader below must catch a misspelt metric, a misspelt
   label, a label value that is never exported and a legend naming a missing label.
3. The real server ($FERRODIR_BIN) on loopback ports, after one ldapsearch, and a second
   one replicating from it (so that the consumer's ferrodir_replication_* series exist):
   every metric name in every expression (panels and variables) must be a series one of
   them exports (a histogram x is exported as x_bucket, x_sum and x_count), every label
   matcher and grouping label must exist on those series, and every literal label value
   must occur. Prints the unknown names and exits 1 otherwise. The consumer runs as a
   mesh node (`multi_provider`), so the multi-provider series exist too.
4. The same for the expressions of deploy/prometheus/ferrodir-rules.yml, whose promtool
   tests feed series named by hand and so can't catch a name the server doesn't export.

Python 3 standard library only (plus ldapsearch from OpenLDAP's tools).
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "ferrodir.json"
RULES = ROOT / "deploy" / "prometheus" / "ferrodir-rules.yml"

# Made by Prometheus itself for every target, not by the server.
PROMETHEUS_MADE = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# Labels Prometheus adds to every series it scrapes.
TARGET_LABELS = {"job", "instance"}
# What the brief asks the dashboard to show.
REQUIRED = {
    "ferrodir_operations_completed_total",
    "ferrodir_operation_duration_seconds_bucket",
    "ferrodir_connections_open",
    "ferrodir_connections_accepted_total",
    "ferrodir_shard_cache_hits_total",
    "ferrodir_shard_cache_lookups_total",
    "ferrodir_shard_commit_mutations_bucket",
    "ferrodir_shard_commit_duration_seconds_bucket",
    "ferrodir_binds_total",
    # Replication: per-peer lag and state, conflicts, the newest CSN per server id.
    "ferrodir_replication_lag_seconds",
    "ferrodir_replication_consumer_state",
    "ferrodir_replication_conflicts_total",
    "ferrodir_replication_sid_csn_seconds",
}

KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
# Aggregation operators: followed by `by (...)` as often as by their parenthesis.
AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
      | (?P<matchers>\{[^{}]*\})
      | (?P<range>\[[^\]]*\])
      | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
      | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
      | (?P<other>[-+*/%^=!<>(),~]+|[^\s])""",
    re.VERBOSE,
)
MATCHER = re.compile(r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?""")


class Query:
    """What one PromQL expression refers to: metrics with their matchers, grouping labels."""

    def __init__(self, expr):
        self.expr = expr
        self.metrics = []  # (name, [(label, op, value)])
        self.grouping = []  # label names in by/without/on/ignoring/group_* clauses
        self.problems = []
        self._read(expr)

    def _read(self, expr):
        # Grafana variables: $__rate_interval and friends are durations; $job inside a
        # matcher's string stays as it is (its value is not checked).
        text = re.sub(r"\$__\w+", "5m", expr)
        tokens = [(m.lastgroup, m.group()) for m in TOKEN.finditer(text) if m.lastgroup != "space"]
        i = 0
        while i < len(tokens):
            kind, value = tokens[i]
            following = tokens[i + 1] if i + 1 < len(tokens) else (None, None)
            if kind == "name" and value in GROUPING:
                if following[1] == "(":
                    j = i + 2
                    while j < len(tokens) and tokens[j][1] != ")":
                        if tokens[j][0] == "name":
                            self.grouping.append(tokens[j][1])
                        j += 1
                    i = j
            elif kind == "name" and (following[1] or "").startswith("("):
                pass  # a function or an aggregation (`time()` comes as one token "()")
            elif kind == "name" and (value.lower() in KEYWORDS or value in AGGREGATIONS):
                pass
            elif kind == "name":
                matchers = []
                if following[0] == "matchers":
                    matchers = self._matchers(following[1])
                    i += 1
                self.metrics.append((value, matchers))
            elif kind == "matchers":
                self.problems.append(f"a selector without a metric name: {value}")
            i += 1

    def _matchers(self, braces):
        inner = braces[1:-1]
        matchers, position = [], 0
        while position < len(inner.strip()):
            m = MATCHER.match(inner, position)
            if not m:
                self.problems.append(f"cannot read the matchers {braces}")
                break
            matchers.append((m.group(1), m.group(2), m.group(3)))
            position = m.end()
        return matchers


def exported_series(metrics_text):
    """{name: [label dicts]} from the Prometheus text format."""
    series = {}
    line_re = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+\S+")
    label_re = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = line_re.match(line)
        if m:
            series.setdefault(m.group(1), []).append(dict(label_re.findall(m.group(3) or "")))
    return series


def literal_values(op, value):
    """The label values a matcher names literally: "a" for = and !=, a|b|c for =~ and !~
    when the pattern is plain words; nothing when it uses a variable or real regex syntax."""
    if "$" in value:
        return []
    if op in ("=", "!="):
        return [value]
    if re.fullmatch(r"[A-Za-z0-9_.+-]+(\|[A-Za-z0-9_.+-]+)*", value.replace(r"\+", "+")):
        return value.split("|")
    return []


def check_query(query, legend, series):
    """Problems of one expression against the exported series."""
    problems = list(query.problems)
    labels_seen = set(TARGET_LABELS)
    for name, matchers in query.metrics:
        if name in PROMETHEUS_MADE:
            continue
        if name not in series:
            problems.append(f"unknown metric {name}")
            continue
        labels = {label: {s[label] for s in series[name] if label in s} for s in series[name] for label in s}
        labels_seen |= set(labels)
        for label, op, value in matchers:
            if label in TARGET_LABELS:
                continue
            if label not in labels:
                problems.append(f"{name} has no label {label}")
                continue
            for literal in literal_values(op, value):
                if literal not in labels[label]:
                    problems.append(f'{name}{{{label}{op}"{value}"}}: {literal!r} is never exported')
    for label in query.grouping:
        if label not in labels_seen:
            problems.append(f"grouping by {label}, which no metric in the expression has")
    for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend or ""):
        if label not in labels_seen:
            problems.append(f"the legend names {label}, which the expression's metrics lack")
    return [f"{problem} (in: {query.expr})" for problem in problems]


def queries(dashboard):
    """(expr, legend, where) for every panel target and every query variable."""
    found = []

    def panels(items):
        for panel in items:
            for target in panel.get("targets", []):
                if "expr" in target:
                    found.append((target["expr"], target.get("legendFormat", ""), panel["title"]))
            panels(panel.get("panels", []))

    panels(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            query = query.get("query", "") if isinstance(query, dict) else query
            # label_values(metric{...}, label): the metric and the label must exist.
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query)
            if m:
                found.append((f"sum by ({m.group(2)}) ({m.group(1)})", "", f"variable {variable['name']}"))
            else:
                found.append((query, "", f"variable {variable['name']}"))
    return found


def rule_expressions(text):
    """(expr, alert) for each `expr:` of a rules file: on one line, or a `|` block. Enough
    YAML for ferrodir-rules.yml without a YAML library."""
    found, lines, i, alert = [], text.splitlines(), 0, "?"
    while i < len(lines):
        named = re.match(r"\s*-?\s*(?:alert|record):\s*(\S+)", lines[i])
        if named:
            alert = named.group(1)
        m = re.match(r"^(\s*)expr:\s*(.*)$", lines[i])
        if m and m.group(2).strip() in ("|", ">", "|-", ">-"):
            indent, block = len(m.group(1)), []
            while i + 1 < len(lines) and (not lines[i + 1].strip() or len(lines[i + 1]) - len(lines[i + 1].lstrip()) > indent):
                i += 1
                block.append(lines[i].strip())
            found.append((" ".join(block).strip(), alert))
        elif m:
            found.append((m.group(2).strip().strip("'\""), alert))
        i += 1
    return found


def check_shape(dashboard):
    problems = []
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    source = variables.get("datasource")
    if not source or source.get("type") != "datasource" or source.get("query") != "prometheus":
        problems.append("no Prometheus data source variable named datasource")
    ids, cells = set(), {}

    def visit(items):
        for panel in items:
            if panel["id"] in ids:
                problems.append(f"panel id {panel['id']} is used twice")
            ids.add(panel["id"])
            grid = panel["gridPos"]
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    if (x, y) in cells:
                        problems.append(f"panels {cells[(x, y)]!r} and {panel['title']!r} overlap")
                    cells[(x, y)] = panel["title"]
            if grid["x"] + grid["w"] > 24:
                problems.append(f"panel {panel['title']!r} is wider than the dashboard")
            if panel["type"] != "row":
                sources = [panel.get("datasource")] + [t.get("datasource") for t in panel.get("targets", [])]
                if any(s != {"type": "prometheus", "uid": "${datasource}"} for s in sources):
                    problems.append(f"panel {panel['title']!r} does not use the ${{datasource}} variable")
            visit(panel.get("panels", []))

    visit(dashboard.get("panels", []))
    return sorted(set(problems))


def negative_control(series):
    """The reader must catch each of these; returns what it failed to catch."""
    broken = {
        "a misspelt metric": ("rate(ferrodir_operations_complete_total[5m])", ""),
        "a misspelt label": ("sum by (listner) (ferrodir_connections_open)", ""),
        "a label value never exported": ('ferrodir_binds_total{result="failed"}', ""),
        "a missing legend label": ("sum by (shard) (ferrodir_shard_writable)", "{{listener}}"),
        "a bare histogram name": ("rate(ferrodir_operation_duration_seconds[5m])", ""),
        "a replication label the consumer lacks": ("max by (peer) (ferrodir_replication_lag_seconds)", ""),
        "a conflict kind never counted": ('rate(ferrodir_replication_conflicts_total{kind="merge"}[5m])', ""),
    }
    return [what for what, (expr, legend) in broken.items() if not check_query(Query(expr), legend, series)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary, work, name, config_text, metrics_port):
    """Starts `binary serve` on CONFIG_TEXT; returns (process, log path) once /readyz
    answers 200, or exits naming the log."""
    config = Path(work) / f"{name}.toml"
    config.write_text(config_text)
    log_path = Path(work) / f"{name}.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen([binary, "serve", "--config", str(config)], stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2) as response:
                if response.status == 200:
                    return server
        except (urllib.error.URLError, OSError):
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            stop(server)
            sys.exit(f"the {name} server did not get ready: {log_path.read_text()[-2000:]}")
        time.sleep(0.25)


def stop(server):
    server.terminate()  # a PID this script started, and only that one
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def scrape(binary):
    """/metrics of the real server after one ldapsearch, and of a second server that
    replicates from it (refreshAndPersist, caught up), as one text."""
    ldap_port, metrics_port = free_port(), free_port()
    consumer_ldap_port, consumer_metrics_port = free_port(), free_port()
    servers = []
    with tempfile.TemporaryDirectory() as work:
        # With [tls], so that the certificate's expiry (an alert's metric) is exported too.
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{work}/key.pem", "-out", f"{work}/cert.pem", "-days", "30", "-subj", "/CN=localhost"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
        )
        (Path(work) / "password").write_text("dashboard-test\n")
        try:
            servers.append(start_server(binary, work, "provider", (
                f'listen = "127.0.0.1:{ldap_port}"\nmetrics_listen = "127.0.0.1:{metrics_port}"\n'
                f'data_dir = "{work}/data"\nshards = 2\nexample_data = true\nroot_password = "dashboard-test"\n'
                f'[tls]\ncert_file = "{work}/cert.pem"\nkey_file = "{work}/key.pem"\n'
            ), metrics_port))
            subprocess.run(
                ["ldapsearch", "-x", "-LLL", "-H", f"ldap://127.0.0.1:{ldap_port}", "-b", "dc=example,dc=com", "(uid=*)", "dn"],
                check=True, stdout=subprocess.DEVNULL, timeout=30,
            )
            # Ready means its first refresh is done and it persists.
            servers.append(start_server(binary, work, "consumer", (
                f'listen = "127.0.0.1:{consumer_ldap_port}"\nmetrics_listen = "127.0.0.1:{consumer_metrics_port}"\n'
                f'data_dir = "{work}/consumer-data"\nshards = 1\nserver_id = 2\nmulti_provider = true\n'
                f'[[replication]]\nrid = 1\nprovider = "ldap://127.0.0.1:{ldap_port}"\n'
                f'bind_dn = "cn=admin,dc=example,dc=com"\npassword_file = "{work}/password"\n'
                f'search_base = "dc=example,dc=com"\ntype = "refreshAndPersist"\nretry = "1 +"\n'
            ), consumer_metrics_port))
            texts = []
            for port in (metrics_port, consumer_metrics_port):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                    texts.append(response.read().decode())
            return "\n".join(texts)
        finally:
            for server in reversed(servers):
                stop(server)


def main():
    binary = os.environ.get("FERRODIR_BIN")
    if not binary:
        sys.exit("set FERRODIR_BIN to the ferrodir binary")
    dashboard = json.loads(DASHBOARD.read_text())
    failed = 0
    passed = 0

    shape = check_shape(dashboard)
    for problem in shape:
        print(f"FAIL: {problem}", file=sys.stderr)
    if shape:
        failed += 1
    else:
        passed += 1
        print(f"ok: the dashboard's shape (${{datasource}} everywhere, {len(dashboard['panels'])} panels, no overlaps)")

    series = exported_series(scrape(binary))
    if "ferrodir_replication_consumer_state" not in series:
        failed += 1
        print("FAIL: the consumer exported no ferrodir_replication_consumer_state", file=sys.stderr)
    missed = negative_control(series)
    if missed:
        failed += 1
        print(f"FAIL: negative control: the checker missed {', '.join(missed)}", file=sys.stderr)
    else:
        passed += 1
        print("ok: negative control: misspelt metrics, labels, values and legends are caught")

    problems, used = [], set()
    all_queries = queries(dashboard)
    for expr, legend, where in all_queries:
        query = Query(expr)
        used |= {name for name, _ in query.metrics}
        problems += [f"{where}: {p}" for p in check_query(query, legend, series)]
    unknown = sorted({name for name, _ in (m for e, _, _ in all_queries for m in Query(e).metrics)}
                     - set(series) - PROMETHEUS_MADE)
    if problems:
        failed += 1
        print(f"FAIL: unknown metric names: {unknown}" if unknown else "FAIL: label problems", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
    else:
        passed += 1
        print(f"ok: {len(all_queries)} queries use {len(used)} metrics, all exported by the server, "
              f"with existing labels and values")
    rules = rule_expressions(RULES.read_text())
    rule_problems, rule_metrics = [], set()
    for expr, alert in rules:
        query = Query(expr)
        rule_metrics |= {name for name, _ in query.metrics}
        rule_problems += [f"{alert}: {p}" for p in check_query(query, "", series)]
    if rule_problems or len(rules) < 5:
        failed += 1
        print(f"FAIL: alert rules ({len(rules)} expressions read):", file=sys.stderr)
        for problem in rule_problems:
            print(f"  {problem}", file=sys.stderr)
    else:
        passed += 1
        print(f"ok: the {len(rules)} alert rules use {len(rule_metrics)} metrics, all exported (or Prometheus's up)")

    missing = sorted(REQUIRED - used)
    if missing:
        failed += 1
        print(f"FAIL: the dashboard does not show {missing}", file=sys.stderr)
    else:
        passed += 1
        print("ok: operations, latency, errors, connections, cache hit ratio, batch sizes, fsync latency, binds,"
              " replication lag and state per peer, conflicts and the newest CSN per server id are all shown")

    print(f"dashboard: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
