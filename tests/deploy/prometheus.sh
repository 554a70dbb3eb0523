#!/usr/bin/env bash
# Checks deploy/prometheus/ferrodir-rules.yml:
# 1. promtool check rules (syntax, PromQL, templates);
# 2. promtool test rules with ferrodir-rules.test.yml: each alert fires on series that
#    should fire it, stays silent on series that should not, and waits out its `for`;
# 3. every alert has a test that expects it to fire and one that expects silence;
# 4. negative controls: with any one alert removed, or with every `for` dropped, the tests
#    fail, so they really check what they claim.
# Needs: promtool (Debian: prometheus), python3 with PyYAML.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=tests/deploy/lib.sh
source "$here/lib.sh"
rules=$root/deploy/prometheus/ferrodir-rules.yml
tests=$root/deploy/prometheus/ferrodir-rules.test.yml

if ! command -v promtool >/dev/null; then
    echo "promtool is not installed (Debian: apt-get install prometheus)" >&2
    exit 1
fi

if output=$(promtool check rules "$rules" 2>&1); then
    pass "promtool check rules: $(grep -o '[0-9]* rules found' <<<"$output")"
else
    fail "promtool check rules: $output"
fi
if output=$(promtool test rules "$tests" 2>&1); then
    pass "promtool test rules: SUCCESS"
else
    fail "promtool test rules: $output"
fi

if output=$(python3 - "$rules" "$tests" 2>&1 <<'EOF'
import sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))
tests = yaml.safe_load(open(sys.argv[2]))
alerts = [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]
fires, silent = set(), set()
for test in tests["tests"]:
    for case in test.get("alert_rule_test", []):
        (fires if case.get("exp_alerts") else silent).add(case["alertname"])
missing = [f"{a}: no case where it fires" for a in alerts if a not in fires]
missing += [f"{a}: no case where it stays silent" for a in alerts if a not in silent]
if missing:
    sys.exit("; ".join(missing))
print(", ".join(alerts))
EOF
); then
    pass "every alert is tested firing and silent ($output)"
else
    fail "untested alerts: $output"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$tests" "$work/"
mapfile -t alerts < <(grep -oP '^\s+- alert: \K\w+' "$rules")
caught=0
for alert in "${alerts[@]}"; do
    python3 - "$rules" "$alert" >"$work/ferrodir-rules.yml" <<'EOF'
import sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))
for group in rules["groups"]:
    group["rules"] = [r for r in group["rules"] if r.get("alert") != sys.argv[2]]
yaml.safe_dump(rules, sys.stdout)
EOF
    if promtool test rules "$work/ferrodir-rules.test.yml" >/dev/null 2>&1; then
        fail "negative control: the tests pass without $alert"
    else
        caught=$((caught + 1))
    fi
done
if [ "$caught" -eq "${#alerts[@]}" ] && [ "$caught" -gt 0 ]; then
    pass "negative control: removing any one of the ${#alerts[@]} alerts fails the tests"
fi
sed 's/^\(\s*\)for: .*/\1for: 0m/' "$rules" >"$work/ferrodir-rules.yml"
if promtool test rules "$work/ferrodir-rules.test.yml" >/dev/null 2>&1; then
    fail "negative control: the tests pass with every 'for' set to 0m"
else
    pass "negative control: dropping the 'for' durations fails the tests"
fi

finish prometheus
