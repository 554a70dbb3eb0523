#!/usr/bin/env bash
# The access log's cost (issue #28): the lookup rate with the access log off, on to a file
# with built-in rotation, and on to standard output redirected to a file; and the bytes
# the log takes per operation, against 389-ds's own access log when an instance is given.
# On 127.0.0.1 only. See docs/BENCHMARKS.md, "Access log cost (issue #28)".
#
#   bash bench/accesslog.sh                      # 10k users, 5 rounds, server on CPU 0
#   bash bench/accesslog.sh --cores 8 --rounds 3 # server on CPUs 0-7, ldclt on the rest
#   bash bench/accesslog.sh --parts bytes --ds389-port 38989 \
#        --ds389-log /var/log/dirsrv/slapd-bench/access --ds389-pw PASSWORD
#
# Rate (part "rate"): ferrodir with `shards` = server cores, pinned to CPUs 0..K-1; ldclt
# with 8 threads per server core on the other CPUs (on 2 CPUs: server CPU 0, ldclt CPU 1,
# as bench/run.sh), random base lookups of uid=userNNNNN (run.sh's "base" scenario), one
# 10-s sample per run. Three servers over the same data, started one at a time (never two
# at once), in turn within each round, the order rotated from round to round:
#   off     [access_log] enabled = false
#   file    path = a file, rotate_bytes = 100 MB, keep_files = 2 (the issue's setting)
#   stdout  path = "-" (the default), standard output redirected to a file
# Reported: the median ops/s of each over the rounds, and file/off and stdout/off.
#
# Bytes (part "bytes"): ferrodir writing to a file (no rotation), then each of four
# operations from ldclt (bench/run.sh's): a random base lookup, a subtree search by uid=,
# a simple bind on a new connection (bindeach,bindonly: connection, BIND, RESULT, UNBIND
# and close lines), a replace of description; 2 threads, one 10-s sample each. Bytes per
# operation = what the log grew by / the RESULT lines it gained (every line counted:
# connection events too). The searches and the modify bind as the rootDN once per
# connection, the bind scenario as uid=user00001 (password1: gen-data.py's). With
# --ds389-port, the same against a running 389-ds holding the same gen-data.py data
# (bound as --ds389-dn, default "cn=Directory Manager"), reading its --ds389-log; turn its
# buffering off first (nsslapd-accesslog-logbuffering: off) so the file is whole when read.
#
# Options: --size N (users, default 10000), --rounds R (5), --cores K (1), --parts
# rate,bytes (both), --out DIR, --no-build. From the folder bench/pack-scale.sh makes, run
# scale.sh --check-pack first (it unpacks the packages this script then uses). Every
# process started here is stopped by PID on exit. About 3 minutes with the defaults.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ORIG_ARGS="$*"
SIZE=10000; ROUNDS=5; CORES=1; PARTS=rate,bytes; OUT_DIR=""; BUILD=1
DS389_PORT=""; DS389_LOG=""; DS389_DN="cn=Directory Manager"; DS389_PW=""
while [ $# -gt 0 ]; do
  case $1 in
    --size) SIZE=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --cores) CORES=$2; shift ;;
    --parts) PARTS=$2; shift ;;
    --out) OUT_DIR=$2; shift ;;
    --no-build) BUILD=0 ;;
    --ds389-port) DS389_PORT=$2; shift ;;
    --ds389-log) DS389_LOG=$2; shift ;;
    --ds389-dn) DS389_DN=$2; shift ;;
    --ds389-pw) DS389_PW=$2; shift ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$SIZE" -le 100000 ] || { echo "--size at most 100000 (uid=userNNNNN names)" >&2; exit 2; }

if [ -d "$HERE/debs" ]; then  # the folder pack-scale.sh made: its binaries and packages
  ROOT=$HERE/root
  [ -e "$ROOT/.unpacked" ] || { echo "run scale.sh --check-pack first (it unpacks $ROOT)" >&2; exit 1; }
  ARCH_DIR=$(ls -d "$ROOT"/usr/lib/*-linux-gnu | head -1)
  PACK_LD="$ARCH_DIR:$ROOT/lib/$(basename "$ARCH_DIR"):$ARCH_DIR/dirsrv:$ARCH_DIR/dirsrv/plugins:$ROOT/usr/lib/ldap"
  WRAP=$ROOT/.wrap; mkdir -p "$WRAP"
  for prog in usr/bin/ldclt usr/bin/ldapsearch; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%q SASL_PATH=%q LDAPNOINIT=1 exec %q "$@"\n' \
      "$PACK_LD" "$ARCH_DIR/sasl2" "$ROOT/$prog" > "$WRAP/$(basename "$prog")"
    chmod +x "$WRAP/$(basename "$prog")"
  done
  FERRODIR=$HERE/bin/ferrodir; LDCLT=$WRAP/ldclt; LDAPSEARCH=$WRAP/ldapsearch
  LIBDIR=$HERE/lib; GEN=$HERE/gen-data.py; BUILD=0
  OUT=${OUT_DIR:-$HERE/accesslog-out/$(date +%Y%m%d-%H%M%S)}
else
  REPO=$(cd "$HERE/.." && pwd)
  LIBDIR=$HERE/lib; GEN=$HERE/gen-data.py
  FERRODIR=$(cd "${CARGO_TARGET_DIR:-$REPO/target}" 2>/dev/null && pwd)/release/ferrodir
  OUT=${OUT_DIR:-$REPO/bench/out/accesslog-$(date +%Y%m%d-%H%M%S)}
fi
source "$LIBDIR/common.sh"
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
trap 'stop_all' EXIT
trap 'exit 130' INT TERM

if [ $BUILD = 1 ]; then
  (cd "$REPO" && cargo build --release --locked --bin ferrodir) >"$OUT/build.log" 2>&1 \
    || { tail -20 "$OUT/build.log"; exit 1; }
fi
[ -x "$FERRODIR" ] || { echo "no $FERRODIR (drop --no-build)" >&2; exit 1; }

TOTAL_CPUS=$(nproc)
[ "$CORES" -lt "$TOTAL_CPUS" ] || { echo "--cores $CORES leaves ldclt no CPU of $TOTAL_CPUS" >&2; exit 2; }
SERVER_CPUS=0-$((CORES - 1)); [ "$CORES" = 1 ] && SERVER_CPUS=0
CLIENT_CPUS=$CORES-$((TOTAL_CPUS - 1)); [ "$CORES" = $((TOTAL_CPUS - 1)) ] && CLIENT_CPUS=$CORES
CLIENT_THREADS=$((8 * CORES))
FD_PORT=${FD_PORT:-13889}
MASK=XXXXX
log "ferrodir $FERRODIR; server CPUs $SERVER_CPUS, ldclt CPUs $CLIENT_CPUS ($CLIENT_THREADS threads); $SIZE users"
{ echo "command: bash bench/accesslog.sh $ORIG_ARGS"; echo "commit: $(git -C "${REPO:-$HERE}" rev-parse --short HEAD 2>/dev/null || echo pack)"
  echo "cpus: $TOTAL_CPUS ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-))"; } > "$OUT/machine.txt"

python3 "$GEN" "$SIZE" > "$OUT/data.ldif"
FD=$OUT/ferrodir
FD_EXTRA_CONFIG="" load_ferrodir "$FD" "$OUT/data.ldif" "$SIZE" "$CORES" > /dev/null

# variant_config NAME -> writes $FD/NAME.toml (the import's config plus the [access_log] table)
variant_config() {
  local table
  case $1 in
    off) table="enabled = false" ;;
    file) table="enabled = true
path = \"$FD/access.log\"
rotate_bytes = 100000000
keep_files = 2" ;;
    plainfile) table="enabled = true
path = \"$FD/access.log\"" ;;
    stdout) table="enabled = true
path = \"-\"" ;;
  esac
  FD_EXTRA_CONFIG="[access_log]
$table" write_ferrodir_config "$FD/$1.toml" "$SIZE" "$CORES"
}

start_variant() {  # NAME: stdout goes to $FD/serve.log (the stdout variant's log file)
  variant_config "$1"
  cp "$FD/$1.toml" "$FD/ferrodir.toml"
  rm -f "$FD"/access.log*
  start_ferrodir "$FD" "$FD_PORT" "$SERVER_CPUS"
  warm_read "$FD_PORT"
}

value_of() {  # key "k=v k=v" -> v
  local pair; for pair in $2; do [ "${pair%%=*}" = "$1" ] && { echo "${pair#*=}"; return; }; done; echo 0
}
median() { python3 -c 'import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(round(statistics.median(v),1) if v else 0)' "$@"; }

# --- rate ---------------------------------------------------------------------------------------
if [[ ,$PARTS, == *,rate,* ]]; then
  declare -A RATES=([off]="" [file]="" [stdout]="")
  ORDER=(off file stdout)
  for round in $(seq "$ROUNDS"); do
    for v in "${ORDER[@]}"; do
      start_variant "$v"
      ldclt_measure "$OUT/rate-$v-r$round.out" "$CLIENT_CPUS" "$FD_PORT" "$FERRODIR_PID" 1 "$CLIENT_THREADS" \
        -e "esearch,randombase,randombaselow=0,randombasehigh=$((SIZE - 1))" -s base \
        -f "objectClass=*" -b "uid=user$MASK,ou=people,$SUFFIX"
      ops=$(value_of ops_per_s "$MEASURE")
      bytes=$({ cat "$FD"/access.log* "$FD/serve.log" 2>/dev/null || true; } | wc -c)
      log "round $round $v: $MEASURE log_bytes=$bytes"
      echo "round=$round variant=$v $MEASURE log_bytes=$bytes" >> "$OUT/rate.txt"
      RATES[$v]+=" $ops"
      stop_pid "$FERRODIR_PID"
    done
    ORDER=("${ORDER[@]:1}" "${ORDER[0]}")  # rotate: each variant goes first once in three rounds
  done
  # The medians of ops/s, and of the server's CPU (user + system, every thread: the log's
  # writer included) per operation: on a machine shared with other work the rate swings
  # with it, the CPU per operation much less.
  python3 - "$OUT/rate.txt" "$CORES" "$ROUNDS" <<'PY' | tee "$OUT/rate.md"
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = dict(p.split("=", 1) for p in line.split())
    ops = float(f["ops_total"])
    cpu_us = (float(f["cpu_user_s"]) + float(f["cpu_sys_s"])) / ops * 1e6 if ops else 0
    runs.setdefault(f["variant"], []).append((float(f["ops_per_s"]), cpu_us))
med = lambda v, i: statistics.median(r[i] for r in runs[v])
print(f"## Rate: random base lookups, {sys.argv[2]} server core(s), {sys.argv[3]} rounds (medians)")
print("| access log | ops/s | vs off | server CPU µs/op | off's µs/op as a share of this | runs (ops/s) |")
print("|---|---|---|---|---|---|")
for v in ("off", "file", "stdout"):
    if v not in runs:
        continue
    print(f"| {v} | {med(v, 0):.0f} | {med(v, 0) / med('off', 0):.3f} | {med(v, 1):.2f} | "
          f"{med('off', 1) / med(v, 1):.3f} | {' '.join(f'{r[0]:.0f}' for r in runs[v])} |")
PY
fi

# --- bytes per operation -----------------------------------------------------------------------
# measure_bytes NAME PORT LOGFILE ARGS... -> one line "NAME bytes= results= per_op="
settled_size() {  # FILE: its size once it stopped growing for 0.6 s (at most 10 s)
  local last=-1 now i
  for i in $(seq 50); do
    now=$(stat -c %s "$1" 2>/dev/null || echo 0)
    if [ "$now" = "$last" ]; then
      sleep 0.4; [ "$(stat -c %s "$1")" = "$now" ] && { echo "$now"; return; }
    fi
    last=$now; sleep 0.2
  done
  echo "$now"
}
measure_bytes() {
  local server=$1 name=$2 port=$3 file=$4; shift 4
  local b0 b1 results
  b0=$(settled_size "$file")
  timeout -k 5 60 "$LDCLT" -h 127.0.0.1 -p "$port" -n 2 -N 1 -q "$@" > "$OUT/bytes-$server-$name.out" 2>&1 || true
  b1=$(settled_size "$file")
  results=$(tail -c +$((b0 + 1)) "$file" | head -c $((b1 - b0)) | grep -c ' RESULT ' || true)
  echo "server=$server op=$name bytes=$((b1 - b0)) results=$results per_op=$(python3 -c "print(round($((b1 - b0))/$results,1) if $results else 0)")" \
    | tee -a "$OUT/bytes.txt"
}
bytes_scenarios() {  # SERVER PORT LOGFILE BIND_DN BIND_PW
  local server=$1 port=$2 file=$3 auth=(-D "$4" -w "$5")
  measure_bytes "$server" base "$port" "$file" "${auth[@]}" \
    -e "esearch,randombase,randombaselow=0,randombasehigh=$((SIZE - 1))" -s base -f "objectClass=*" -b "uid=user$MASK,ou=people,$SUFFIX"
  measure_bytes "$server" uid-eq "$port" "$file" "${auth[@]}" \
    -e esearch,random -s subtree -b "$SUFFIX" -f "uid=user$MASK" -r 0 -R $((SIZE - 1))
  measure_bytes "$server" bind "$port" "$file" -D "uid=user00001,ou=people,$SUFFIX" -w password1 -e bindeach,bindonly
  measure_bytes "$server" modify "$port" "$file" "${auth[@]}" \
    -e "attreplace=description:XXXXXX,random" -b "ou=people,$SUFFIX" -f "uid=user$MASK" -r 0 -R $((SIZE - 1))
}
if [[ ,$PARTS, == *,bytes,* ]]; then
  start_variant plainfile
  bytes_scenarios ferrodir "$FD_PORT" "$FD/access.log" "$ROOT_DN" "$ROOT_PW"
  stop_pid "$FERRODIR_PID"
  if [ -n "$DS389_PORT" ]; then
    [ -r "$DS389_LOG" ] || { log "no readable --ds389-log $DS389_LOG"; exit 1; }
    bytes_scenarios 389-ds "$DS389_PORT" "$DS389_LOG" "$DS389_DN" "$DS389_PW"
  fi
  python3 - "$OUT/bytes.txt" <<'PY' | tee "$OUT/bytes.md"
import sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(p.split("=", 1) for p in line.split())
    rows.setdefault(f["op"], {})[f["server"]] = float(f["per_op"])
print("## Access log bytes per operation")
print("| operation | ferrodir | 389-ds | ferrodir / 389-ds |")
print("|---|---|---|---|")
for op, r in rows.items():
    fd, ds = r.get("ferrodir"), r.get("389-ds")
    print(f"| {op} | {fd} | {ds if ds is not None else '-'} | {f'{fd/ds:.3f}' if fd and ds else '-'} |")
PY
fi
log "done: $OUT"
