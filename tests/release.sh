#!/usr/bin/env bash
# Checks that a binary built without the `fault-injection` feature, the one users get,
# refuses a config with a [testing] table (power-cut simulation, acknowledging before sync):
# it must exit non-zero and say why, never start with the switches quietly ignored.
#
#   FERRODIR_BIN=target/release/ferrodir bash tests/release.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FERRODIR_BIN:-target/release/ferrodir}
if [ ! -x "$bin" ]; then
    echo "tests/release.sh: no binary at $bin (cargo build --release --bin ferrodir)" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/ferrodir.toml" <<'EOF'
shards = 2
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
[testing]
simulate_power_cut = true
EOF
set +e
output=$(timeout 60 "$bin" serve --config "$work/ferrodir.toml" --data-dir "$work/data" \
    --listen 127.0.0.1:0 </dev/null 2>&1)
code=$?
set -e
if [ $code -eq 0 ] || [ $code -eq 124 ]; then
    echo "FAIL: $bin accepted a config with a [testing] table (exit $code): is it built with fault-injection?" >&2
    printf '%s\n' "$output" | tail -5 >&2
    exit 1
fi
if ! grep -q 'the \[testing\] table .* is not available in this build' <<<"$output"; then
    echo "FAIL: $bin exited $code on a [testing] table, but without saying why:" >&2
    printf '%s\n' "$output" | tail -5 >&2
    exit 1
fi
echo "release binary: refuses the [testing] table (exit $code): $(grep -o 'the \[testing\] table[^:]*' <<<"$output" | head -1)"
