#!/usr/bin/env bash
# Checks deploy/ferrodir.service the way systemd itself would read it: `systemd-analyze
# verify` (with the binary at the unit's ExecStart path, as the verifier requires) and
# `systemd-analyze security --offline` with an exposure of at most 2.0. Needs the Debian
# package systemd; FERRODIR_BIN is the binary to place at /usr/local/bin/ferrodir when
# nothing is there yet (CI runs as root in a fresh machine).
set -euo pipefail
cd "$(dirname "$0")/../.."
unit=deploy/ferrodir.service
exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
if [ ! -x "$exec_path" ]; then
  bin=${FERRODIR_BIN:-target/debug/ferrodir}
  install -D -m 0755 "$bin" "$exec_path"
fi
systemd-analyze verify "$unit"
systemd-analyze security --offline=true --threshold=20 "$unit" | tail -n 1
echo "systemd unit: verify and security (exposure <= 2.0) passed"
