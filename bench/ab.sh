#!/usr/bin/env bash
# A/B of two ferrodir builds (or two settings) on one bench/profile.sh scenario, alternating
# A, B, A, B... so that a busy shared machine's drift hits both alike; read the differences,
# not the rates. Each run is `bench/profile.sh --count --bin BIN` (10k users, 2 shards,
# server on CPU 0, ldclt on CPU 1); one line per run: ops/s of each ldclt, and CPU µs per
# operation of the whole server.
#
#   bash bench/ab.sh --scenario modify --rounds 3 OLD_BIN NEW_BIN
#   bash bench/ab.sh --scenario modify --rounds 2 --limits "commit_coalesce_us = 120" BIN BIN
# --limits L (repeatable, in the order of the binaries): [limits] keys for that run
# (FD_EXTRA_LIMITS). Outputs under --out DIR (default bench/out/ab-<time>).
set -euo pipefail
cd "$(dirname "$0")/.."
SCENARIO=modify; ROUNDS=3; OUT=""; LIMITS=(); BINS=()
while [ $# -gt 0 ]; do
  case $1 in
    --scenario) SCENARIO=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --limits) LIMITS+=("$2"); shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) BINS+=("$1") ;;
  esac
  shift
done
[ ${#BINS[@]} -ge 2 ] || { echo "two binaries, please (the same one twice with --limits)" >&2; exit 2; }
OUT=${OUT:-bench/out/ab-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
for round in $(seq 1 "$ROUNDS"); do
  for i in "${!BINS[@]}"; do
    bin=${BINS[$i]}; limits=${LIMITS[$i]:-}; dir=$OUT/$i-r$round
    FD_EXTRA_LIMITS="$limits" bash bench/profile.sh --count --bin "$bin" --scenario "$SCENARIO" --out "$dir" >/dev/null 2>&1
    report=$dir/ferrodir-$SCENARIO.txt
    ops=$(grep -h '^# ldclt' "$report" | sed -E 's/^# ldclt-ferrodir-([a-z-]+)\.out: ops_per_s=([0-9.]+).*/\1 \2/' | tr '\n' ' ')
    cpu=$(python3 - "$report" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r'cpu_user_s=([\d.]+) cpu_sys_s=([\d.]+).*window_s=(\d+)', text)
rate = sum(float(x) for x in re.findall(r'ops_per_s=([\d.]+)', text))
# The CPU was read over the window, the rates are ldclt's averages over its whole run.
print(f"{(float(m[1]) + float(m[2])) * 1e6 / (rate * int(m[3])):.1f} µs/op" if m and rate else "n/a")
PY
)
    echo "r$round $(basename "$bin")${limits:+ [$limits]}: $ops| $cpu | $(grep -h '^# cpu' "$report" | sed 's/^# cpu //' | tr '\n' ' ')"
  done
done
