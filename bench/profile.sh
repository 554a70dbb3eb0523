#!/usr/bin/env bash
# Where the server's CPU goes in one scenario: ferrodir (or slapd) pinned to CPU 0, ldclt
# (8 threads) on CPU 1, `perf record -g` on the server for the middle of the run, and the
# top of `perf report` written to OUT/<server>-<scenario>.txt.
#
#   bash bench/profile.sh                          # base lookups on 10k entries, ferrodir
#   bash bench/profile.sh --scenario mixed --n 10000 --server slapd --out DIR
# Scenarios: base, uid-eq, sub10, modify, add, mixed (8 search + 2 modify threads), null (the
# do-nothing responder under the base load). Needs perf, ldclt, slapd; stops what it starts.
# --bin PATH runs that ferrodir binary as it is (no build; the bench tools come from
# CARGO_TARGET_DIR's release folder). --count counts instead of sampling: `perf stat`
# (context switches, system calls) and each thread's CPU from /proc over the same window,
# in OUT/<server>-<scenario>.txt. bench/ab.sh alternates two binaries with it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib/common.sh
N=10000; SCENARIO=base; SERVER=ferrodir; SECONDS_RUN=12; OUT=""; BIN=""; COUNT=0
while [ $# -gt 0 ]; do
  case $1 in
    --n) N=$2; shift ;;
    --scenario) SCENARIO=$2; shift ;;
    --server) SERVER=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    --out) OUT=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --count) COUNT=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-bench/out/profile-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
trap 'stop_all' EXIT
trap 'exit 130' INT TERM
PORT=${PORT:-13495}
if [ -z "$BIN" ]; then
  cargo build --release --bin ferrodir -p ferrodir-server -p ferrodir-bench >&2 2>"$OUT/build.log"
fi
RELEASE_DIR=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release  # CARGO_TARGET_DIR is honoured
FERRODIR=${BIN:-$RELEASE_DIR/ferrodir}; TOOLS_DIR=$RELEASE_DIR

data=$OUT/data-$N.ldif
[ -s "$data" ] || python3 bench/gen-data.py "$N" > "$data"
mask=$([ "$N" -le 100000 ] && echo XXXXX || echo XXXXXXX)
search=(-e "esearch,randombase,randombaselow=0,randombasehigh=$((N - 1))" -s base -f "objectClass=*"
        -b "uid=user$mask,ou=people,$SUFFIX")
modify=(-D "$ROOT_DN" -w "$ROOT_PW" -e "attreplace=description:XXXXXX,random" -b "ou=people,$SUFFIX"
        -f "uid=user$mask" -r 0 -R $((N - 1)))
case $SCENARIO in
  base|null|mixed) args=("${search[@]}") ;;
  uid-eq) args=(-e esearch,random -s subtree -b "$SUFFIX" -f "uid=user$mask" -r 0 -R $((N - 1))) ;;
  sub10)  # as bench/run.sh: "cn=user DDD*" with one digit fewer than N-1 has, ~11 entries
    last=$((N - 1)); digits=$((${#last} - 1)); high=$((last / 10))
    args=(-e esearch,random -s subtree -b "$SUFFIX" -f "cn=user $(printf 'X%.0s' $(seq $digits))*"
          -r $((high / 10 + 1)) -R $high) ;;
  modify) args=("${modify[@]}") ;;
  add) args=(-D "$ROOT_DN" -w "$ROOT_PW" -e add,person,incr,noloop,commoncounter -b "ou=people,$SUFFIX"
             -f "cn=prof$RANDOM-XXXXXXX" -r 0 -R 9999999) ;;
  *) echo "unknown scenario $SCENARIO" >&2; exit 2 ;;
esac

dir=$OUT/$SERVER
case $SERVER in
  ferrodir) load_ferrodir "$dir" "$data" "$N" 2 >/dev/null; start_ferrodir "$dir" "$PORT" 0; pid=$FERRODIR_PID ;;
  slapd) load_slapd "$dir" "$data" >/dev/null; start_slapd "$dir" "$PORT" 0; pid=$SLAPD_PID ;;
  null) mkdir -p "$dir"; start_null "$dir" "$PORT" 0 1; pid=$NULL_PID ;;
  *) echo "unknown server $SERVER" >&2; exit 2 ;;
esac
warm_read "$PORT"
samples=$(( (SECONDS_RUN + 9) / 10 ))
ldclt_start "$OUT/ldclt-$SERVER-$SCENARIO.out" 1 "$PORT" "$samples" 8 "${args[@]}"
main_ldclt=$LDCLT_PID
if [ "$SCENARIO" = mixed ]; then
  ldclt_start "$OUT/ldclt-$SERVER-mixed-modify.out" 1 "$PORT" "$samples" 2 "${modify[@]}"
fi
sleep 2
window=$((samples * 10 - 4))
# Each thread's name and CPU ticks (user + system), to see which threads a change moved.
threads() { local t; for t in /proc/"$pid"/task/*; do
  echo "$(basename "$t") $(tr ' ' _ < "$t/comm") $(awk '{print $14 + $15}' "$t/stat")"; done; }
before=$($UTIL cpu "$pid")
if [ $COUNT = 1 ]; then
  threads > "$OUT/threads-before"
  perf stat -e context-switches,raw_syscalls:sys_enter -p "$pid" -o "$OUT/$SERVER-$SCENARIO.stat" \
    -- sleep "$window" 2>"$OUT/perf-record.log"
  threads > "$OUT/threads-after"
else
  perf record -F 1999 -g -p "$pid" -o "$OUT/$SERVER-$SCENARIO.perf" -- sleep "$window" 2>"$OUT/perf-record.log"
fi
after=$($UTIL cpu "$pid")
wait "$main_ldclt" || true; [ "$SCENARIO" = mixed ] && { wait "$LDCLT_PID" || true; }
{
  echo "# $SERVER, scenario $SCENARIO, N=$N: $(cpu_delta "$before" "$after") window_s=$window"
  for f in "$OUT"/ldclt-"$SERVER"-*.out; do echo "# $(basename "$f"): $($UTIL ldclt "$f" 2>/dev/null)"; done
  if [ $COUNT = 1 ]; then
    grep -E 'context-switches|sys_enter|elapsed' "$OUT/$SERVER-$SCENARIO.stat" | sed 's/^ */# /'
    # CPU share per thread name over the window (100 = one CPU); threads of one name summed.
    join <(sort "$OUT/threads-before") <(sort "$OUT/threads-after") \
      | awk -v w="$window" '{ d = $5 - $3; if (d > 0) c[$2] += d } END { for (k in c) printf "# cpu %s %.1f%%\n", k, c[k] / w }' \
      | sort -t' ' -k4 -rn
  else
    perf report -i "$OUT/$SERVER-$SCENARIO.perf" --no-children --sort dso,symbol --percent-limit 0.7 --stdio -g none 2>/dev/null \
      | grep -v '^$' | head -80
  fi
} > "$OUT/$SERVER-$SCENARIO.txt"
rm -f "$OUT/$SERVER-$SCENARIO.perf"
log "profile in $OUT/$SERVER-$SCENARIO.txt"
