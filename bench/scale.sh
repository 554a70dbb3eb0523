#!/usr/bin/env bash
# Core scaling and per-core efficiency (issues #14 and #28): ferrodir (shards = server
# cores K) and slapd (back-mdb, `threads` = K, at least 2, slapd's minimum), each pinned
# to CPUs 0..K-1, ldclt on the remaining CPUs. Made for a 16-core machine with no network
# and no package installs: run it from the folder bench/pack-scale.sh prepares, where it
# unpacks slapd, ldap-utils and 389-ds-base (ldclt) into ./root and runs them from there.
#
#   bash scale.sh [--phases cores,shared,threads,scenarios] [--cores 1,2,4,8] [--n 10000]
#                 [--reps 1] [--null-reps 1] [--at 8] [--threads 1,2,4,5,8,10,20,50]
#                 [--scenarios sub10,modify,mixed] [--max-seconds 480] [--out DIR]
#   bash scale.sh --check-pack [--out DIR]   # only the check below, then exit
#   bash bench/scale.sh --system ...         # from the repository, with the system's packages
#
# Check first (alone with --check-pack; a normal run does it first and stops with the
# reason if it fails): the tools it needs (python3, taskset, timeout) are there; ldd with
# the pack's LD_LIBRARY_PATH finds every library of every unpacked program and module and
# of ferrodir and the bench tools; this machine's glibc (libc6 is not packed) is at least
# the highest GLIBC_x.y version they need; slapd and ferrodir each start on a small data
# set and answer one search with the right entry.
#
# Phases (--phases picks any of them; they run in this order, the target rows first):
#   cores:     random base lookups at each K of --cores, ldclt with 8 threads per server
#              core on the other CPUs; ferrodir, slapd and the null responder (K threads,
#              the client-and-loopback ceiling of the row), --reps interleaved runs. A row
#              whose client has fewer cores than the server is marked "client-bound"; with
#              no CPU left (K = nproc) the client shares the server's cores and the row says
#              "shared with the server"; K > nproc is skipped (with a note).
#   shared:    the same at K = nproc (16 on the target), the client sharing the server's
#              cores; not repeated when the cores phase already ran K = nproc.
#   threads:   the 2007 Apache DS test's shape: random base lookups at --at server cores
#              (8) with --threads ldclt threads (1, 2, 4, 5, 8, 10, 20, 50), ferrodir and
#              slapd, one run each.
#   scenarios: at --at server cores, 8 x K ldclt threads: sub10 (a substring search that
#              returns ~11 entries), modify (durable replace of description, as rootDN),
#              mixed (8:2 base lookups and modifies, two ldclt at once), as bench/run.sh.
# The threads and scenarios phases share one set of servers (threads first, as the
# modifies change the data). Where nproc / 2 < --at (this 2-core machine) they run at
# K = nproc / 2, the largest K that leaves the client as many cores as the server, and
# results.md says so; with nproc = 1 they are skipped.
#
# Output, written as each point finishes (a run cut short keeps what it measured):
# points.jsonl (one JSON line per point: phase, scenario, K, threads, ops/s, ops, errors,
# the server's CPU seconds from /proc/PID/stat, ops per CPU-second), results.md (tables
# rewritten after every point: medians over repetitions; CPU efficiency = ops per
# CPU-second at K / ops per CPU-second at K = 1, the issue #28 targets: >= 85% at 8,
# >= 75% at 16; throughput scaling = ops/s at K / (K x ops/s at 1)), check.txt,
# machine.txt, and the ldclt and server logs.
#
# Time budget with the defaults on 16 cores (about 7.7 of the 8 minutes, setup included;
# a point is one 10-s ldclt sample plus ~1 s connect and exit, ~11 s; a server setup
# (ferrodir import with K shards, three starts, warm reads) ~5 s):
#   setup: unpack the .debs ~10 s, check (ldd, glibc, two small servers) ~10 s, data and
#     slapadd of 10k entries ~3 s                                               ~25 s
#   cores: 4 K (1, 2, 4, 8) x (setup 5 s + 3 points {ferrodir, slapd, null})   ~152 s
#   shared: K = 16, setup 5 s + 3 points                                        ~38 s
#   threads: K = 8, setup 5 s + 8 thread counts x 2 servers = 16 points        ~181 s
#   scenarios: K = 8 (the threads phase's servers), 3 x 2 = 6 points            ~66 s
#                                                                        total ~462 s
# (The issue #14 run, --phases cores --cores 1,2,4,8,12 --reps 2, takes ~325 s alone.)
# --max-seconds (default 480, counted from the start of this script) stops cleanly before
# a point or a server setup that would not end in time (its estimate: the longest one
# seen so far): servers stopped, the points so far kept, results.md marked incomplete,
# exit 0.
set -euo pipefail
SECONDS=0
HERE=$(cd "$(dirname "$0")" && pwd)
CORES=1,2,4,8; N=10000; REPS=1; NULL_REPS=1; OUT=""; SYSTEM=0; CHECK_ONLY=0; MAX_SECONDS=480
PHASES=cores,shared,threads,scenarios; AT_WANTED=8; THREADS=1,2,4,5,8,10,20,50; SCENARIOS=sub10,modify,mixed
while [ $# -gt 0 ]; do
  case $1 in
    --phases) PHASES=$2; shift ;;
    --at) AT_WANTED=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --scenarios) SCENARIOS=$2; shift ;;
    --cores) CORES=$2; shift ;;
    --n) N=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --null-reps) NULL_REPS=$2; shift ;;
    --max-seconds) MAX_SECONDS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --system) SYSTEM=1 ;;
    --check-pack) CHECK_ONLY=1 ;;
    -h|--help) sed -n "2,$(($(grep -n '^set -euo' "$0" | cut -d: -f1) - 1))p" "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
for phase in ${PHASES//,/ }; do
  case $phase in cores|threads|scenarios|shared) ;; *) echo "scale.sh: unknown phase $phase (cores, threads, scenarios, shared)" >&2; exit 2 ;; esac
done
for sc in ${SCENARIOS//,/ }; do
  case $sc in sub10|modify|mixed) ;; *) echo "scale.sh: unknown scenario $sc (sub10, modify, mixed)" >&2; exit 2 ;; esac
done
STAMP=$(date +%Y%m%d-%H%M%S); [ $CHECK_ONLY = 1 ] && STAMP=check-$STAMP
fail() {
  echo "scale.sh: $*" >&2
  [ $CHECK_ONLY = 1 ] || echo "scale.sh: stopped before measuring anything: fix the above and rerun" >&2
  exit 1
}

PACK_LD=""; PACK_INFO=""
if [ -d "$HERE/debs" ] && [ $SYSTEM = 0 ]; then  # the packed folder
  LIBDIR=$HERE/lib; GEN=$HERE/gen-data.py; ROOT=$HERE/root; PACK_INFO=$HERE/pack-info.txt
  if [ ! -e "$ROOT/.unpacked" ]; then
    rm -rf "$ROOT" && mkdir -p "$ROOT"
    if command -v dpkg >/dev/null; then how="dpkg -x"; else how="util.py undeb (no dpkg here)"; fi
    echo "[scale] unpacking $(ls "$HERE"/debs/*.deb | wc -l) .debs into $ROOT with $how" >&2
    for deb in "$HERE"/debs/*.deb; do
      if command -v dpkg >/dev/null; then dpkg -x "$deb" "$ROOT"; else python3 "$LIBDIR/util.py" undeb "$deb" "$ROOT"; fi
    done
    touch "$ROOT/.unpacked"
  fi
  ARCH_DIR=$(ls -d "$ROOT"/usr/lib/*-linux-gnu | head -1)
  PACK_LD="$ARCH_DIR:$ROOT/lib/$(basename "$ARCH_DIR"):$ARCH_DIR/dirsrv:$ARCH_DIR/dirsrv/plugins:$ROOT/usr/lib/ldap"
  # Only the packed programs get the pack's libraries (through these wrappers, which
  # exec, so the PID stays the program's): python3, taskset and the rest keep the
  # system's. SASL plugins and OpenLDAP client config would otherwise come from /usr, /etc.
  WRAP=$ROOT/.wrap; mkdir -p "$WRAP"
  for prog in usr/sbin/slapd usr/sbin/slapadd usr/bin/ldclt usr/bin/ldapsearch; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%q SASL_PATH=%q LDAPNOINIT=1 exec %q "$@"\n' \
      "$PACK_LD" "$ARCH_DIR/sasl2" "$ROOT/$prog" > "$WRAP/$(basename "$prog")"
    chmod +x "$WRAP/$(basename "$prog")"
  done
  REAL_PROGRAMS=("$ROOT/usr/sbin/slapd" "$ROOT/usr/bin/ldclt" "$ROOT/usr/bin/ldapsearch")
  FERRODIR=$HERE/bin/ferrodir
  SLAPD=$WRAP/slapd; SLAPADD=$WRAP/slapadd; LDCLT=$WRAP/ldclt; LDAPSEARCH=$WRAP/ldapsearch
  SCHEMA_DIR=$ROOT/etc/ldap/schema; SLAPD_MODULE_DIR=$ROOT/usr/lib/ldap
  TOOLS_DIR=""; [ -x "$HERE/bin/ldap-null-responder" ] && TOOLS_DIR=$HERE/bin
  OUT=${OUT:-$HERE/scale-out/$STAMP}
else  # from the repository, with the system's packages and the release build
  REPO=$(cd "$HERE/.." && pwd)
  LIBDIR=$HERE/lib; GEN=$HERE/gen-data.py
  RELEASE=${CARGO_TARGET_DIR:-$REPO/target}/release
  FERRODIR=$RELEASE/ferrodir
  TOOLS_DIR=""; [ -x "$RELEASE/ldap-null-responder" ] && TOOLS_DIR=$RELEASE
  REAL_PROGRAMS=(/usr/sbin/slapd /usr/bin/ldclt /usr/bin/ldapsearch)
  OUT=${OUT:-$REPO/bench/out/scale-$STAMP}
fi
source "$LIBDIR/common.sh"
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
POINTS=$OUT/points.jsonl; RESULTS=$OUT/results.md
TOTAL_CPUS=$(nproc)
ALL_CPUS=0-$((TOTAL_CPUS - 1)); [ "$TOTAL_CPUS" = 1 ] && ALL_CPUS=0
FD_PORT=${FD_PORT:-13589}; SL_PORT=${SL_PORT:-13590}; NULL_PORT=${NULL_PORT:-13591}
FINISHED=0; STATUS=""; HEADER=""; NOTES=()
on_exit() {
  stop_all
  if [ $CHECK_ONLY = 0 ] && [ $FINISHED = 0 ] && [ -s "${POINTS:-/nonexistent}" ]; then
    python3 "$LIBDIR/scale_report.py" "$POINTS" "$RESULTS" "$HEADER" \
      "**INCOMPLETE: the run ended early at ${SECONDS} s (error or signal); the points below are those that finished.**" \
      "$(printf '%s\n' "${NOTES[@]}")" || true
  fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# --- the check ---------------------------------------------------------------------------
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" = "$1" ]; }  # a >= b
glibc_needed_by() {  # files... -> the highest GLIBC_x.y any of them asks for
  if command -v objdump >/dev/null; then
    objdump -T "$@" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*'
  else  # the version names are in .dynstr; close enough without binutils
    grep -aho 'GLIBC_[0-9][0-9.]*[0-9]' "$@" 2>/dev/null
  fi | sed 's/GLIBC_//' | sort -uV | tail -1
}
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

check_pack() {  # dir: everything below, or fail with the reason
  local dir=$1 tool f missing=0 elves=() machine required recorded
  mkdir -p "$dir"
  for tool in python3 taskset timeout ldd od sort; do
    command -v "$tool" >/dev/null || fail "check: $tool is not installed on this machine"
  done
  # Everything the run starts or loads, and every other unpacked ELF file: a library a
  # packed program needs and the pack lacks shows up here, not in the middle of the run.
  elves=("$FERRODIR" "${REAL_PROGRAMS[@]}" "$SLAPD_MODULE_DIR/back_mdb.so")
  if [ -n "$TOOLS_DIR" ]; then
    for f in "$TOOLS_DIR"/ldap-*; do if [ -x "$f" ]; then elves+=("$f"); fi; done
  fi
  if [ -n "${ROOT:-}" ]; then
    for f in "$HERE"/bin/*; do if [ -f "$f" ]; then elves+=("$f"); fi; done
    while IFS= read -r -d '' f; do if is_elf "$f"; then elves+=("$f"); fi; done \
      < <(find "$ROOT/usr" "$ROOT/lib" -type f \( -perm -u+x -o -name '*.so*' \) -print0 2>/dev/null)
  fi
  mapfile -t elves < <(printf '%s\n' "${elves[@]}" | awk '!seen[$0]++')
  : > "$dir/ldd.txt"
  for f in "${elves[@]}"; do
    [ -e "$f" ] || { echo "$f: missing" >> "$dir/ldd.txt"; missing=$((missing + 1)); continue; }
    { echo "== $f"; LD_LIBRARY_PATH=$PACK_LD ldd "$f" 2>&1 || true; } >> "$dir/ldd.txt"
  done
  if grep -q 'not found\|: missing$' "$dir/ldd.txt"; then
    echo "check FAILED: libraries or programs missing (ldd with the pack's LD_LIBRARY_PATH):" >&2
    awk '/^== /{file=$2} /not found/{print "  " file ": " $0} /: missing$/{print "  " $0}' "$dir/ldd.txt" | head -20 >&2
    fail "check: see $dir/ldd.txt"
  fi
  machine=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  [ -n "$machine" ] || machine=$(ldd --version 2>&1 | head -1 | awk '{print $NF}')
  required=$(glibc_needed_by "${elves[@]}")
  recorded=""; [ -n "$PACK_INFO" ] && [ -f "$PACK_INFO" ] && recorded=$(sed -n 's/^glibc_required=//p' "$PACK_INFO")
  [ -n "$recorded" ] && version_ge "$recorded" "$required" && required=$recorded
  [ -n "$required" ] || fail "check: could not read the GLIBC versions the binaries need"
  version_ge "$machine" "$required" \
    || fail "check: this machine's glibc is $machine, the pack needs >= $required (libc6 is not packed: pack on an older system)"
  # The loader works for ldclt (its options are checked later, by the first point).
  "$LDCLT" -V > "$dir/ldclt-version.txt" 2>&1 || true
  grep -q 'ldclt version' "$dir/ldclt-version.txt" || { cat "$dir/ldclt-version.txt" >&2; fail "check: ldclt does not start"; }
  # Both servers start and answer one search with the right entry.
  python3 "$GEN" 100 > "$dir/data.ldif"
  load_slapd "$dir/slapd" "$dir/data.ldif" > /dev/null
  load_ferrodir "$dir/ferrodir" "$dir/data.ldif" 100 1 > /dev/null
  start_slapd "$dir/slapd" "$SL_PORT" "$ALL_CPUS"
  start_ferrodir "$dir/ferrodir" "$FD_PORT" "$ALL_CPUS"
  local port name
  for name in slapd ferrodir; do
    port=$SL_PORT; [ $name = ferrodir ] && port=$FD_PORT
    "$LDAPSEARCH" -x -LLL -H "ldap://127.0.0.1:$port" -b "uid=user00042,ou=people,$SUFFIX" -s base \
      "(objectClass=*)" uid > "$dir/$name-search.txt" 2>&1 || true
    grep -q '^uid: user00042$' "$dir/$name-search.txt" \
      || { cat "$dir/$name-search.txt" >&2; fail "check: $name did not answer the search (see $dir/$name/serve.log)"; }
  done
  stop_all
  {
    echo "check passed at $(date -u +%Y-%m-%dT%H:%M:%SZ) after ${SECONDS} s"
    echo "ldd: ${#elves[@]} ELF files, every library found (ldd.txt)"
    echo "glibc: this machine $machine, the binaries need >= $required"
    echo "slapd and ferrodir started and answered a base search for uid=user00042"
  } > "$dir/check.txt"
  cat "$dir/check.txt" >&2
}

machine_info() {
  {
    echo "cpus=$TOTAL_CPUS"
    echo "cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
    echo "kernel=$(uname -srm)"
    echo "glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null)"
    echo "slapd=$("$SLAPD" -VV 2>&1 | head -1 | sed 's/^ *//')"
    [ -z "$PACK_INFO" ] || sed 's/^/pack./' "$PACK_INFO"
  } > "$OUT/machine.txt"
}

log "check (output in $OUT/check)"
check_pack "$OUT/check"
if [ $CHECK_ONLY = 1 ]; then
  log "check-pack: OK in ${SECONDS} s"
  exit 0
fi
machine_info
: > "$POINTS"

log "N=$N: generating data"
python3 "$GEN" "$N" > "$OUT/data.ldif"
load_slapd "$OUT/slapd" "$OUT/data.ldif" > /dev/null
base_args=(-e "esearch,randombase,randombaselow=0,randombasehigh=$((N - 1))" -s base -f "objectClass=*"
           -b "uid=user$([ "$N" -le 100000 ] && echo XXXXX || echo XXXXXXX),ou=people,$SUFFIX")
HEADER="N=$N users, phases $PHASES; cores and shared rows: medians of $REPS interleaved 10-s ldclt runs (null responder: $NULL_REPS), the other phases one 10-s run per point; $TOTAL_CPUS CPUs ($(sed -n 's/^cpu_model=//p' "$OUT/machine.txt")); $(sed -n 's/^slapd=//p' "$OUT/machine.txt"); ferrodir $(sed -n 's/^pack.commit=/commit /p' "$OUT/machine.txt" | grep . || echo "$FERRODIR")"

cpu_list() {  # from to -> "from-to", "from" or "" (none)
  if [ "$1" -lt "$2" ]; then echo "$1-$2"; elif [ "$1" -eq "$2" ]; then echo "$1"; else echo ""; fi
}
POINT_EST=12; SETUP_EST=8  # seconds; raised to the longest seen
over_budget() {  # seconds needed -> true when they would run past --max-seconds
  [ $((SECONDS + $1)) -gt "$MAX_SECONDS" ]
}
stop_early() {  # what would have come next
  STATUS="**INCOMPLETE: stopped by --max-seconds $MAX_SECONDS at ${SECONDS} s before $1; the points below are those that finished.**"
  log "stopping: $STATUS"
}
note() { NOTES+=("$1"); log "note: $1"; }
report() {
  local notes; notes=$(printf '%s\n' "${NOTES[@]}")
  python3 "$LIBDIR/scale_report.py" "$POINTS" "$RESULTS" "$HEADER" "$STATUS" "$notes"
}
value_of() {  # key "k=v k=v ..." -> v
  local kv; for kv in $2; do [ "${kv%%=*}" = "$1" ] && { echo "${kv#*=}"; return; }; done; echo 0
}
has_phase() { [[ ",$PHASES," == *",$1,"* ]]; }

# ldclt arguments of a scenario (as bench/run.sh's scenario_def) -> SC_ARGS
scenario_args() {  # name
  local mask; mask=$([ "$N" -le 100000 ] && echo XXXXX || echo XXXXXXX)
  case $1 in
    base) SC_ARGS=("${base_args[@]}") ;;
    sub10)  # "cn=user DDD*": DDD and DDD0..DDD9, ~11 entries (one digit fewer than N-1 has)
      local last=$((N - 1)) digits
      digits=$((${#last} - 1))
      SC_ARGS=(-e esearch,random -s subtree -b "$SUFFIX" -f "cn=user $(printf 'X%.0s' $(seq $digits))*"
               -r $((10 ** (digits - 1))) -R $((10 ** digits - 1))) ;;
    modify)  # durable: each acknowledged replace is on disk (power-loss / no dbnosync)
      SC_ARGS=(-D "$ROOT_DN" -w "$ROOT_PW" -e "attreplace=description:XXXXXX,random" -b "ou=people,$SUFFIX"
               -f "uid=user$mask" -r 0 -R $((N - 1))) ;;
    *) log "unknown scenario $1"; exit 2 ;;
  esac
}

# Servers for one block of points: ferrodir re-imported with K shards, slapd with
# `threads` K (at least 2), the null responder with K threads, all on SERVER_CPUS.
setup_servers() {  # k server_cpus null(0/1)
  local k=$1 setup_start=$SECONDS
  SLAPD_THREADS=$((k < 2 ? 2 : k)) write_slapd_config "$OUT/slapd/slapd.conf" "$OUT/slapd/db" "$OUT/slapd/slapd.pid"
  load_ferrodir "$OUT/ferrodir-k$k" "$OUT/data.ldif" "$N" "$k" > /dev/null
  start_ferrodir "$OUT/ferrodir-k$k" "$FD_PORT" "$2"
  start_slapd "$OUT/slapd" "$SL_PORT" "$2"
  NULL_PID=""; [ "$3" = 1 ] && start_null "$OUT" "$NULL_PORT" "$2" "$k"
  warm_read "$FD_PORT"; warm_read "$SL_PORT"
  if [ $((SECONDS - setup_start)) -gt $SETUP_EST ]; then SETUP_EST=$((SECONDS - setup_start)); fi
}

# One measured point -> a line in points.jsonl. The mixed scenario runs two ldclt
# processes at once (searches and modifies, 8:2 as bench/run.sh), and counts both.
measure_point() {  # phase k server scenario threads client_cpus label rep
  local phase=$1 k=$2 server=$3 sc=$4 threads=$5 ccpus=$6 label=$7 rep=$8 port pid cpu_s per_cpu extra=()
  case $server in ferrodir) port=$FD_PORT pid=$FERRODIR_PID ;; slapd) port=$SL_PORT pid=$SLAPD_PID ;;
                  null) port=$NULL_PORT pid=$NULL_PID ;; esac
  local file="$OUT/ldclt-$phase-k$k-$sc-t$threads-$server-r$rep.out" point_start=$SECONDS
  if [ "$sc" = mixed ]; then
    local before after search modify search_threads=$((threads * 8 / 10)) search_pid
    local modify_threads=$((threads - threads * 8 / 10))
    [ $modify_threads -ge 1 ] || modify_threads=1
    before=$($UTIL cpu "$pid")
    scenario_args base; ldclt_start "$file.search" "$ccpus" "$port" 1 "$search_threads" "${SC_ARGS[@]}"
    search_pid=$LDCLT_PID
    scenario_args modify; ldclt_start "$file.modify" "$ccpus" "$port" 1 "$modify_threads" "${SC_ARGS[@]}"
    wait "$search_pid" || true; wait "$LDCLT_PID" || true
    after=$($UTIL cpu "$pid")
    search=$($UTIL ldclt "$file.search" 2>>"$file.errors"); modify=$($UTIL ldclt "$file.modify" 2>>"$file.errors")
    MEASURE="ops_per_s=$(awk -v a="$(value_of ops_per_s "$search")" -v b="$(value_of ops_per_s "$modify")" 'BEGIN {print a + b}')"
    MEASURE+=" ops_total=$(( $(value_of ops_total "$search") + $(value_of ops_total "$modify") ))"
    MEASURE+=" errors=$(( $(value_of errors "$search") + $(value_of errors "$modify") )) $(cpu_delta "$before" "$after")"
    extra=(search_ops_per_s="$(value_of ops_per_s "$search")" modify_ops_per_s="$(value_of ops_per_s "$modify")"
           search_threads=$search_threads modify_threads=$modify_threads)
  else
    scenario_args "$sc"
    ldclt_measure "$file" "$ccpus" "$port" "$pid" 1 "$threads" "${SC_ARGS[@]}"
  fi
  cpu_s=$(awk -v u="$(value_of cpu_user_s "$MEASURE")" -v s="$(value_of cpu_sys_s "$MEASURE")" 'BEGIN {print u + s}')
  per_cpu=$(awk -v t="$(value_of ops_total "$MEASURE")" -v c="$cpu_s" 'BEGIN {print (c > 0 ? sprintf("%.1f", t / c) : 0)}')
  $UTIL json type=scale phase="$phase" scenario="$sc" cores="$k" server="$server" rep="$rep" threads="$threads" \
    slapd_threads=$((k < 2 ? 2 : k)) client_label="$label" server_cpus="$(cpu_list 0 $((k - 1)))" client_cpus="$ccpus" \
    $MEASURE "${extra[@]}" ops_per_cpu_s="$per_cpu" elapsed_s=$SECONDS >> "$POINTS"
  report
  if [ $((SECONDS - point_start)) -gt $POINT_EST ]; then POINT_EST=$((SECONDS - point_start)); fi
  log "  $phase K=$k $sc t=$threads $server rep $rep: $(value_of ops_per_s "$MEASURE") ops/s, $per_cpu ops per CPU-second (${SECONDS} s so far)"
}

# Random base lookups at K server cores, 8 x K ldclt threads, REPS interleaved repetitions
# of ferrodir, slapd and (NULL_REPS of them) the null responder: the cores and shared phases.
lookup_block() {  # phase k
  local phase=$1 k=$2 server_cpus client_cpus label="" threads rep server
  server_cpus=$(cpu_list 0 $((k - 1)))
  client_cpus=$(cpu_list "$k" $((TOTAL_CPUS - 1)))
  if [ -z "$client_cpus" ]; then client_cpus=$ALL_CPUS; label="shared with the server"
  elif [ $((TOTAL_CPUS - k)) -lt "$k" ]; then label="client-bound: $((TOTAL_CPUS - k)) client cores"; fi
  threads=$((8 * k))
  if over_budget $((SETUP_EST + POINT_EST)); then stop_early "$phase K=$k"; return; fi
  log "$phase K=$k: server on CPUs $server_cpus, ldclt ($threads threads) on $client_cpus${label:+ ($label)}, slapd threads $((k < 2 ? 2 : k))"
  setup_servers "$k" "$server_cpus" 1
  for rep in $(seq "$REPS"); do
    for server in ferrodir slapd null; do
      [ -z "$STATUS" ] || break 2
      if [ $server = null ] && { [ -z "$NULL_PID" ] || [ "$rep" -gt "$NULL_REPS" ]; }; then continue; fi
      if over_budget $POINT_EST; then stop_early "$phase K=$k $server rep $rep"; break 2; fi
      measure_point "$phase" "$k" $server base "$threads" "$client_cpus" "$label" "$rep"
    done
  done
  stop_all
}

# The 2007 test's shape (client threads 1..50) and the other scenarios, at AT_K server
# cores, one block of servers for both (threads first: the modifies come after them).
at_k_block() {
  local k=$AT_K server_cpus client_cpus t sc server
  server_cpus=$(cpu_list 0 $((k - 1))); client_cpus=$(cpu_list "$k" $((TOTAL_CPUS - 1)))
  if over_budget $((SETUP_EST + POINT_EST)); then stop_early "the K=$k phases"; return; fi
  log "threads/scenarios K=$k: server on CPUs $server_cpus, ldclt on $client_cpus, slapd threads $((k < 2 ? 2 : k))"
  setup_servers "$k" "$server_cpus" 0
  if has_phase threads; then
    for t in ${THREADS//,/ }; do
      for server in ferrodir slapd; do
        [ -z "$STATUS" ] || break 2
        if over_budget $POINT_EST; then stop_early "threads K=$k t=$t $server"; break 2; fi
        measure_point threads "$k" $server base "$t" "$client_cpus" "" 1
      done
    done
  fi
  if has_phase scenarios; then
    for sc in ${SCENARIOS//,/ }; do
      for server in ferrodir slapd; do
        [ -z "$STATUS" ] || break 2
        if over_budget $POINT_EST; then stop_early "scenarios K=$k $sc $server"; break 2; fi
        measure_point scenarios "$k" $server "$sc" $((8 * k)) "$client_cpus" "" 1
      done
    done
  fi
  stop_all
}

# The threads and scenarios phases want AT_K (8) server cores and as many client cores:
# on a smaller machine they run at the largest K that still leaves the client as many
# cores as the server (nproc / 2; 1 on 2 cores), said in results.md, rather than not at all.
AT_K=$AT_WANTED
if { has_phase threads || has_phase scenarios; } && [ $((TOTAL_CPUS / 2)) -lt "$AT_WANTED" ]; then
  AT_K=$((TOTAL_CPUS / 2))
  if [ "$AT_K" -lt 1 ]; then
    note "threads and scenarios phases skipped: $TOTAL_CPUS CPU leaves no client core"
  else
    note "threads and scenarios phases at K=$AT_K, not $AT_WANTED: this machine has $TOTAL_CPUS CPUs and the client gets as many cores as the server"
  fi
fi

for phase in cores shared threads; do  # the target rows first: a run cut short keeps them
  [ -z "$STATUS" ] || break
  has_phase $phase || { [ $phase = threads ] && has_phase scenarios; } || continue
  case $phase in
    cores)
      for k in ${CORES//,/ }; do
        [ -z "$STATUS" ] || break
        if [ "$k" -gt "$TOTAL_CPUS" ]; then note "cores K=$k skipped: this machine has $TOTAL_CPUS CPUs"; continue; fi
        lookup_block cores "$k"
      done ;;
    shared)  # K = nproc: the client shares the server's cores
      if has_phase cores && [[ ",$CORES," == *",$TOTAL_CPUS,"* ]]; then
        note "shared phase: K=$TOTAL_CPUS = nproc was measured by the cores phase (shared with the server); not repeated"
      else
        lookup_block shared "$TOTAL_CPUS"
      fi ;;
    threads) if [ "$AT_K" -ge 1 ]; then at_k_block; fi ;;
  esac
done

[ -n "$STATUS" ] || STATUS="Complete in ${SECONDS} s (setup included)."
report
FINISHED=1
cat "$RESULTS"
log "results in $OUT"
