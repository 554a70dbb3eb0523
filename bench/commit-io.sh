#!/usr/bin/env bash
# What one durable write costs the storage, under the harness's write load: the release
# server with N gen-data users (2 shards) pinned to CPU 0, ldclt (8 threads) on CPU 1, one
# 10-second sample of modifies (`attreplace=description`, random users) and one of adds
# (`add,person`, fresh names), as bench/run.sh runs them. Counted while they run, without
# slowing the server down (no strace): fdatasync and pwrite64 calls with `perf stat` on
# their tracepoints, the bytes the server dirtied in the page cache (/proc/PID/io
# write_bytes: what its pwrites send to the disk), and the CPU of the commit threads
# (`commit-N`) and of the whole server. Prints one line per op:
#
#   modify: writes=.. commits=.. writes_per_commit=.. pwrites_per_commit=.. kib_per_commit=..
#           kib_per_write=.. cpu_us_per_write=.. commit_thread_cpu_us_per_write=..
#
#   BIN=$CARGO_TARGET_DIR/release bash bench/commit-io.sh [--n 10000] [--seconds 10] [--out DIR]
# BIN holds the release ferrodir. Needs perf, ldclt, taskset. Stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib/common.sh
N=10000; SECONDS_RUN=10; OUT=""; OPS="modify add"
while [ $# -gt 0 ]; do
  case $1 in
    --n) N=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    --ops) OPS=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
: "${BIN:?BIN: the folder with the release ferrodir}"
FERRODIR=$BIN/ferrodir
OUT=${OUT:-bench/out/commit-io-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
trap 'stop_all' EXIT
trap 'exit 130' INT TERM
PORT=${PORT:-13903}

data=$OUT/data-$N.ldif
[ -s "$data" ] || python3 bench/gen-data.py "$N" > "$data"
load_ferrodir "$OUT/fd" "$data" "$N" 2 >/dev/null 2>"$OUT/import.log"
start_ferrodir "$OUT/fd" "$PORT" 0
pid=$FERRODIR_PID
warm_read "$PORT"

# "utime+stime ticks of the whole process" and "of its commit-N threads"
cpu_ticks() {
  python3 - "$1" <<'PY'
import os, sys
pid = sys.argv[1]
def ticks(path):
    stat = open(path).read()
    f = stat[stat.rindex(")") + 2:].split()
    return int(f[11]) + int(f[12])
commit = 0
for tid in os.listdir(f"/proc/{pid}/task"):
    try:
        if open(f"/proc/{pid}/task/{tid}/comm").read().startswith("commit-"):
            commit += ticks(f"/proc/{pid}/task/{tid}/stat")
    except FileNotFoundError:
        pass
print(ticks(f"/proc/{pid}/stat"), commit)
PY
}
write_bytes() { awk '/^write_bytes:/ {print $2}' "/proc/$1/io"; }

mask=XXXXX
for op in $OPS; do
  case $op in
    modify) args=(-D "$ROOT_DN" -w "$ROOT_PW" -e "attreplace=description:XXXXXX,random" -b "ou=people,$SUFFIX"
                  -f "uid=user$mask" -r 0 -R $((N - 1))) ;;
    add) args=(-D "$ROOT_DN" -w "$ROOT_PW" -e add,person,incr,noloop,commoncounter -b "ou=people,$SUFFIX"
               -f "cn=cio${RANDOM}XXXXXXX" -r 0 -R 9999999) ;;
    *) echo "unknown op $op" >&2; exit 2 ;;
  esac
  read -r cpu0 commit0 < <(cpu_ticks "$pid")
  bytes0=$(write_bytes "$pid")
  perf stat -x, -e syscalls:sys_enter_fdatasync,syscalls:sys_enter_pwrite64 -p "$pid" \
    -o "$OUT/perf-$op.csv" &
  perf_pid=$!; track $perf_pid
  sleep 0.5
  ldclt_start "$OUT/ldclt-$op.out" 1 "$PORT" $(( (SECONDS_RUN + 9) / 10 )) 8 "${args[@]}"
  wait "$LDCLT_PID" || true
  kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true
  read -r cpu1 commit1 < <(cpu_ticks "$pid")
  bytes1=$(write_bytes "$pid")
  summary=$($UTIL ldclt "$OUT/ldclt-$op.out" 2>/dev/null || true)
  python3 - "$op" "$summary" "$OUT/perf-$op.csv" "$cpu0" "$cpu1" "$commit0" "$commit1" "$bytes0" "$bytes1" <<'PY'
import os, sys
op, summary, csv = sys.argv[1:4]
cpu0, cpu1, c0, c1, b0, b1 = map(int, sys.argv[4:10])
kv = dict(p.split("=", 1) for p in summary.split())
writes = int(kv.get("ops_total", 0))
counts = {}
for line in open(csv):
    parts = line.strip().split(",")
    if len(parts) > 2 and parts[0].isdigit():
        counts[parts[2].split(":")[-1]] = int(parts[0])
syncs = counts.get("sys_enter_fdatasync", 0)
pwrites = counts.get("sys_enter_pwrite64", 0)
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
per = lambda x, n: round(x / n, 2) if n else 0
print(f"{op}: writes={writes} errors={kv.get('errors')} commits={syncs} "
      f"writes_per_commit={per(writes, syncs)} pwrites_per_commit={per(pwrites, syncs)} "
      f"kib_per_commit={per((b1 - b0) / 1024, syncs)} kib_per_write={per((b1 - b0) / 1024, writes)} "
      f"cpu_us_per_write={per((cpu1 - cpu0) * tick_us, writes)} "
      f"commit_thread_cpu_us_per_write={per((c1 - c0) * tick_us, writes)}")
PY
done
