#!/usr/bin/env bash
# Where a base lookup's extra CPU at more shards goes (issue #28, item 2): ferrodir alone,
# random base lookups (ldclt), under `perf stat` and optionally `perf record`, in server
# layouts "SHARDS@CPUS" that separate the two things adding shards changes:
#   1@0     one shard, one core: the baseline (every entry is the worker's own);
#   2@0     two shards on the same core: the code path of more shards (half the lookups
#           read the other shard through this worker's snapshot view, connections split
#           between two event loops) without any cross-core traffic;
#   2@0-1   two shards on two cores: the same code, and now the shared lines (the shard's
#           entry cache partition locks, the cached entries' and redb pages' reference
#           counts, redb's page-cache stripe locks) move between cores.
# So (2@0 - 1@0) is what more shards cost by themselves, (2@0-1 - 2@0) what crossing
# cores costs. On a bigger machine: --layouts 1@0,8@0,8@0-7 --client-cpus 8-15.
#
#   bash bench/percore.sh [--layouts 1@0,2@0,2@0-1] [--reps 3] [--n 10000] [--threads 16]
#                         [--client-cpus ALL] [--record] [--out DIR]
#                         [--binaries NAME=PATH,NAME=PATH]   # e.g. before=/tmp/fd-old,after=target/release/ferrodir
#
# Each point: ferrodir (release build, access log on to its serve.log as in scale.sh)
# started pinned to CPUS, warmed with one subtree read, then one 10-s ldclt sample of
# random base lookups with `perf stat -p PID` attached over the whole ldclt run: CPU
# (task-clock), context switches, CPU migrations, page faults, syscalls
# (raw_syscalls:sys_enter), wakeups (sched:sched_wakeup), and the hardware counters when
# the machine has them (cycles, instructions, cache-misses: a VM often has none; perf
# says "<not supported>" and the table shows –). Every count is divided by the operations
# ldclt counted. Layouts alternate within each repetition (round robin); the table gives
# medians. With --binaries, every layout runs with each binary in turn (a before/after
# comparison on the same busy machine); the table's rows are NAME:LAYOUT. --record adds, after the last repetition, `perf record -g` (cpu-clock, 999 Hz,
# 8 s) per layout and the top symbols by self time (profile-LAYOUT.txt).
#
# Time: per point ~2 s start + 11 s ldclt; 3 layouts x 3 reps ~2 minutes, --record ~40 s.
# Needs perf (linux-perf) and ldclt; run as root or with perf_event_paranoid <= 1.
# Output: bench/out/percore-<time>/ (points.jsonl, results.md, perf-*.txt, ldclt logs).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/.." && pwd)
LAYOUTS=1@0,2@0,2@0-1; BINARIES=""; REPS=3; N=10000; THREADS=16; CLIENT_CPUS=""; RECORD=0; OUT=""
while [ $# -gt 0 ]; do
  case $1 in
    --layouts) LAYOUTS=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --binaries) BINARIES=$2; shift ;;
    --n) N=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --client-cpus) CLIENT_CPUS=$2; shift ;;
    --record) RECORD=1 ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n "2,$(($(grep -n '^set -euo' "$0" | cut -d: -f1) - 1))p" "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
RELEASE=${CARGO_TARGET_DIR:-$REPO/target}/release
FERRODIR=$RELEASE/ferrodir
BINARIES=${BINARIES:-ferrodir=$FERRODIR}
source "$HERE/lib/common.sh"
command -v perf >/dev/null || { echo "percore.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 1; }
for bin in ${BINARIES//,/ }; do
  [ -x "${bin#*=}" ] || { echo "percore.sh: no ${bin#*=} (cargo build --release -p ferrodir-server)" >&2; exit 1; }
done
FERRODIR=${BINARIES%%,*}; FERRODIR=${FERRODIR#*=}  # imports with the first
CLIENT_CPUS=${CLIENT_CPUS:-0-$(($(nproc) - 1))}
OUT=${OUT:-$REPO/bench/out/percore-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
FD_PORT=${FD_PORT:-13689}
trap stop_all EXIT
trap 'exit 130' INT TERM

# Software events first: they always count; hardware ones may be "<not supported>".
EVENTS=task-clock,context-switches,cpu-migrations,page-faults,raw_syscalls:sys_enter,sched:sched_wakeup,cycles,instructions,cache-misses
perf stat -e "$EVENTS" -- true > /dev/null 2>&1 || EVENTS=task-clock,context-switches,cpu-migrations,page-faults

python3 "$HERE/gen-data.py" "$N" > "$OUT/data.ldif"
mask=$([ "$N" -le 100000 ] && echo XXXXX || echo XXXXXXX)
base_args=(-e "esearch,randombase,randombaselow=0,randombasehigh=$((N - 1))" -s base -f "objectClass=*"
           -b "uid=user$mask,ou=people,$SUFFIX")
for layout in ${LAYOUTS//,/ }; do
  shards=${layout%@*}
  [ -d "$OUT/ferrodir-s$shards" ] || load_ferrodir "$OUT/ferrodir-s$shards" "$OUT/data.ldif" "$N" "$shards" > /dev/null
done

point() {  # name=binary layout rep
  local FERRODIR=${1#*=} name=${1%%=*} layout=$2 rep=$3 shards=${2%@*} cpus=${2#*@} tag perf_pid
  tag=$name-$(echo "$layout" | tr '@' '_')
  start_ferrodir "$OUT/ferrodir-s$shards" "$FD_PORT" "$cpus"
  warm_read "$FD_PORT"
  perf stat -x, -e "$EVENTS" -p "$FERRODIR_PID" -o "$OUT/perf-$tag-r$rep.txt" &
  perf_pid=$!; track $perf_pid
  ldclt_measure "$OUT/ldclt-$tag-r$rep.out" "$CLIENT_CPUS" "$FD_PORT" "$FERRODIR_PID" 1 "$THREADS" "${base_args[@]}"
  kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true
  $UTIL json layout="$([ "$BINARIES" = "${BINARIES%,*}" ] && echo "$layout" || echo "$name:$layout")" binary="$FERRODIR" shards="$shards" server_cpus="$cpus" client_cpus="$CLIENT_CPUS" rep="$rep" \
    threads="$THREADS" perf_file="$OUT/perf-$tag-r$rep.txt" $MEASURE >> "$OUT/points.jsonl"
  log "  $name $layout rep $rep: $(echo "$MEASURE" | grep -o 'ops_per_s=[0-9.]*')"
  stop_all
}

log "layouts $LAYOUTS, $REPS reps, ldclt $THREADS threads on CPUs $CLIENT_CPUS, events $EVENTS"
for rep in $(seq "$REPS"); do
  for layout in ${LAYOUTS//,/ }; do
    for bin in ${BINARIES//,/ }; do point "$bin" "$layout" "$rep"; done
  done
done

if [ $RECORD = 1 ]; then
  for layout in ${LAYOUTS//,/ }; do
    shards=${layout%@*}; tag=$(echo "$layout" | tr '@' '_')
    start_ferrodir "$OUT/ferrodir-s$shards" "$FD_PORT" "${layout#*@}"
    warm_read "$FD_PORT"
    ldclt_start "$OUT/ldclt-record-$tag.out" "$CLIENT_CPUS" "$FD_PORT" 1 "$THREADS" "${base_args[@]}"
    sleep 1  # past ldclt's connects
    perf record -e cpu-clock -F 999 -g -p "$FERRODIR_PID" -o "$OUT/perf-$tag.data" -- sleep 8 2> /dev/null
    wait "$LDCLT_PID" || true
    perf report -i "$OUT/perf-$tag.data" --no-children --sort dso,sym --stdio 2> /dev/null \
      | grep -v '^#' | grep -v '^$' | grep '%' | head -60 > "$OUT/profile-$tag.txt" || true
    stop_all
  done
fi

python3 "$HERE/lib/percore_report.py" "$OUT/points.jsonl" > "$OUT/results.md"
cat "$OUT/results.md"
log "results in $OUT"
