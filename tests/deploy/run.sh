#!/usr/bin/env bash
# Checks everything under deploy/ that can be checked without a container runtime or a
# cluster (CI can pull no base images): the container entrypoint with the real binary, the
# Kubernetes manifests, the Grafana dashboard and the Prometheus rules against what the
# real server exports, the rules' unit tests. Exits non-zero if any check fails.
#
#   tests/deploy/run.sh                 # FERRODIR_BIN: target/release/ferrodir, else target/debug/ferrodir
#   FERRODIR_BIN=/path/to/ferrodir tests/deploy/run.sh
#
# Needs (installs nothing itself): bash, python3 (3.11+ for tomllib), ldap-utils
# (ldapsearch, ldapwhoami), openssl, promtool (Debian: prometheus), and from pip
# kubernetes-validate (which brings PyYAML and jsonschema). shellcheck is used when present.
# Takes about 20 seconds (17 s with a debug build on 2 busy cores).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ -z "${FERRODIR_BIN:-}" ]; then
    if [ -x "$root/target/release/ferrodir" ]; then
        FERRODIR_BIN=$root/target/release/ferrodir
    else
        FERRODIR_BIN=$root/target/debug/ferrodir
    fi
fi
export FERRODIR_BIN

missing=()
[ -x "$FERRODIR_BIN" ] || missing+=("the ferrodir binary at $FERRODIR_BIN (cargo build, or set FERRODIR_BIN)")
for tool in python3 ldapsearch ldapwhoami openssl promtool; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
command -v kubernetes-validate >/dev/null || missing+=("kubernetes-validate (pip install kubernetes-validate)")
python3 -c 'import tomllib, yaml' 2>/dev/null || missing+=("python3 3.11+ with PyYAML (pip install kubernetes-validate brings it)")
if [ "${#missing[@]}" -gt 0 ]; then
    printf 'tests/deploy: missing: %s\n' "${missing[@]}" >&2
    exit 1
fi

echo "tests/deploy with $FERRODIR_BIN"
results=()
status=0
run() {
    local name=$1
    shift
    echo "== $name"
    local started=$SECONDS
    if "$@"; then
        results+=("passed  $name ($((SECONDS - started)) s)")
    else
        results+=("FAILED  $name ($((SECONDS - started)) s)")
        status=1
    fi
}

if command -v shellcheck >/dev/null; then
    run shellcheck bash -c "shellcheck -s sh '$root/deploy/container/entrypoint.sh' && cd '$root' && shellcheck -x tests/deploy/*.sh"
fi
run "container entrypoint" bash "$here/entrypoint.sh"
run "kubernetes manifests" bash "$here/kubernetes.sh"
run "grafana dashboard and rule metrics" python3 "$here/dashboard.py"
run "prometheus rules" bash "$here/prometheus.sh"

echo "== summary"
printf '%s\n' "${results[@]}"
failed=$(printf '%s\n' "${results[@]}" | grep -c '^FAILED' || true)
echo "deploy: $((${#results[@]} - failed)) passed, $failed failed"
exit "$status"
