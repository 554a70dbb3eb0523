#!/usr/bin/env bash
# Ferrodir vs OpenLDAP slapd (back-mdb), side by side, same data, same load generator
# (ldclt from 389-ds-base), on 127.0.0.1 only. See docs/BENCHMARKS.md for every column.
#
#   bash bench/run.sh                       # N=10k, all scenarios, 5 interleaved repetitions
#   bash bench/run.sh --quick               # 1 repetition, 3 scenarios (base, uid-eq, modify)
#   bash bench/run.sh --sizes 10000,100000  # several data sets, one after the other
#   bash bench/run.sh --sizes 10000000 --scenarios base,uid-eq --reps 3
#                                           # issue #28: 10M entries (about 48 GB of disk:
#                                           # checked first, the run stops before generating
#                                           # anything when the output folder's disk is short)
#   bash bench/run.sh --matrix              # also 1..50 client threads, pinned and unpinned
#   bash bench/run.sh --smoke               # CI: 2000 entries, one read and one modify run
#   bash bench/run.sh --scenarios isolation --sizes 200000 --reps 1
#                                           # issue #9: unindexed scans against lookups and
#                                           # modifies, and how fast stopped scans stop
#   bash bench/run.sh --scenarios tls --sizes 10000 --reps 3
#                                           # issue #10: lookups over established LDAPS
#                                           # connections and a bind on a new LDAPS
#                                           # connection, RSA and ECDSA certificates
#   bash bench/run.sh --scenarios paged,sorted,memberof --sizes 100000 --reps 3
#                                           # issue #11: the whole ou=people subtree in
#                                           # pages of 1,000, a sorted search of 1,000
#                                           # entries, (memberOf=<a 1,000-member group>)
# Other options: --reps R (default 5), --samples S (10-s ldclt samples per run, default 1),
# --shards K (default 2), --scenarios a,b,c, --matrix-threads 1,8,
# --matrix-reps R (matrix repetitions, default 1; the matrix then gives medians),
# --matrix-scenarios a,b (default base,uid-eq,same,rootdse), --no-install, --out DIR.
# --compare-shards K (issue #14, item 7): a second ferrodir with K shards (e.g. 16) on the same
# data, on the same one CPU, joins the base, uid-eq and sub10 runs; the report compares its
# CPU per operation with the --shards one (target: at most 1.3x).
# KEEP_DATA=1 keeps the databases and the LDIF in the output folder. FD_EXTRA_CONFIG="key = value"
# adds top-level keys to ferrodir's config (e.g. search_scans = "worker"); FD_EXTRA_LIMITS
# adds keys to its [limits] table (e.g. commit_coalesce_us = 0).
# FD_ACCESS=open-read runs ferrodir with the one rule `to * by * read` instead of the
# default rules (Debian's), to measure what the rules cost (BENCHMARKS.md, "Access rules").
# tls (not in the default list): TLS_KEYS="rsa ecdsa" (certificate key types, one after the
# other), TLS_MEASURES="lookup bind plain-lookup plain-bind" (add starttls-bind for StartTLS),
# TLS_DURATION=10 (s per run), TLS_CONNECTIONS=8; section 8.
# paged, sorted, memberof (issue #11, not in the default list): I11_DURATION=10 (s per run),
# I11_PAGE_SIZE=1000, I11_CONNECTIONS=8 (sorted and memberof; paged uses one connection),
# I11_MEASURES="load latency" (latency: the same search on one connection); section 9.
#
# The server under test runs on CPU 0 and ldclt on CPU 1 (taskset); runs are interleaved
# (ferrodir, slapd, responder, ferrodir, ...) so that drift on a shared machine hits all
# servers alike, and the report gives medians and same-run ratios. Every process started
# here is stopped by PID on exit, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib/common.sh

ORIG_ARGS="$*"
SIZES=10000; REPS=5; SAMPLES=1; SHARDS=2; QUICK=0; MATRIX=0; SMOKE=0; INSTALL=1
SCENARIOS=""; OUT_DIR=""; MATRIX_THREADS=1,2,4,8,16,50; MATRIX_REPS=1; MATRIX_SCENARIOS=base,uid-eq,same,rootdse; COMPARE_SHARDS=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --matrix) MATRIX=1 ;;
    --smoke) SMOKE=1 ;;
    --sizes) SIZES=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --samples) SAMPLES=$2; shift ;;
    --shards) SHARDS=$2; shift ;;
    --compare-shards) COMPARE_SHARDS=$2; shift ;;
    --scenarios) SCENARIOS=$2; shift ;;
    --matrix-threads) MATRIX_THREADS=$2; shift ;;
    --matrix-reps) MATRIX_REPS=$2; shift ;;
    --matrix-scenarios) MATRIX_SCENARIOS=$2; shift ;;
    --out) OUT_DIR=$2; shift ;;
    --no-install) INSTALL=0 ;;
    -h|--help) sed -n '2,41p' bench/run.sh; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
# isolation (issue #9) is not in the default list: it takes 3 phases x 2 servers x
# ISO_DURATION s per repetition plus a stop run (section 6). Nor is tls (issue #10,
# section 8): TLS_KEYS x TLS_MEASURES x 2 servers x TLS_DURATION s per repetition. Nor
# are paged, sorted and memberof (issue #11, section 9): 5 runs x 2 servers x I11_DURATION
# s per repetition, 100 s with the defaults.
ALL_SCENARIOS="base,same,rootdse,uid-eq,sub10,bind,modify,add,delete,mixed"
if [ $SMOKE = 1 ]; then SIZES=2000; REPS=1; SAMPLES=1; SCENARIOS=smoke
elif [ $QUICK = 1 ]; then REPS=1; SAMPLES=1; SCENARIOS=${SCENARIOS:-base,uid-eq,modify}
fi
SCENARIOS=${SCENARIOS:-$ALL_SCENARIOS}
# Issue #11's scenarios need the extra data and slapd's sssvlv and memberof overlays
# (bench/lib/common.sh); the other scenarios run on the same servers as before without them.
case ",$SCENARIOS," in *,paged,*|*,sorted,*|*,memberof,*) ISSUE11=1 ;; *) ISSUE11=0 ;; esac
CLIENT_THREADS=8
SERVER_CPU=0; CLIENT_CPU=1
FD_PORT=${FD_PORT:-13489}; SL_PORT=${SL_PORT:-13490}; NULL_PORT=${NULL_PORT:-13491}
FD_LDAPS_PORT=${FD_LDAPS_PORT:-13492}; SL_LDAPS_PORT=${SL_LDAPS_PORT:-13493}
FDK_PORT=${FDK_PORT:-13494}; FERRODIR_K_PID=""
OUT=${OUT_DIR:-bench/out/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
RAW=$OUT/raw.jsonl; : > "$RAW"
# Issue #28: before anything is built or generated, the largest size asked must fit the
# disk (all sizes together with KEEP_DATA=1, which keeps every one).
disk_entries=0
for n in ${SIZES//,/ }; do
  case $n in ''|*[!0-9]*) echo "--sizes: $n is not a number of entries" >&2; exit 2 ;; esac
  if [ "${KEEP_DATA:-0}" = 1 ]; then disk_entries=$((disk_entries + n))
  elif [ "$n" -gt "$disk_entries" ]; then disk_entries=$n; fi
done
disk_check "$OUT" "$disk_entries" "$([ "$ISSUE11" = 1 ] && echo 2 || echo 1)"
trap 'stop_all' EXIT
trap 'exit 130' INT TERM

# --- 1. prerequisites and builds -------------------------------------------------------
install_missing() {
  local missing=()
  command -v slapd >/dev/null || [ -x /usr/sbin/slapd ] || missing+=(slapd)
  command -v ldapsearch >/dev/null || missing+=(ldap-utils)
  command -v ldclt >/dev/null || missing+=(389-ds-base)
  command -v strace >/dev/null || missing+=(strace)
  [ ${#missing[@]} = 0 ] && return 0
  log "installing ${missing[*]}"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2 || {
    $sudo apt-get update >&2 && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2; }
  # The Debian package starts a system slapd on port 389; we never use it, leave it be.
}

build() {  # the server code may be changing under us: retry a failed build a few times
  local i
  for i in 1 2 3 4 5; do
    cargo build --release --bin ferrodir >&2 2>"$OUT/build.log" && break
    [ $i = 5 ] && { tail -20 "$OUT/build.log" >&2; log "ferrodir does not build"; exit 1; }
    log "ferrodir build failed (attempt $i), retrying in 30 s"; sleep 30
  done
  # Where cargo put it (CARGO_TARGET_DIR is honoured).
  RELEASE_DIR=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release
  TOOLS_DIR=""
  if [ -f bench/tools/Cargo.toml ] && cargo build --release -p ferrodir-bench >"$OUT/build-tools.log" 2>&1 \
     && [ -x "$RELEASE_DIR/ldap-null-responder" ] && [ -x "$RELEASE_DIR/ldap-latency" ] \
     && [ -x "$RELEASE_DIR/ldap-isolation" ] && [ -x "$RELEASE_DIR/ldap-search-load" ]; then
    TOOLS_DIR=$RELEASE_DIR
  else
    log "bench tools not built: responder, latency and isolation columns will read n/a (tools not built)"
  fi
}

[ $INSTALL = 1 ] && install_missing
build
FERRODIR=$RELEASE_DIR/ferrodir

# --- 3. scenarios ----------------------------------------------------------------------
# scenario_def NAME N -> SC_ARGS (ldclt arguments), SC_SERVERS, SC_WRITE (1 = count fsyncs)
uid_mask() { [ "$1" -le 100000 ] && echo XXXXX || echo XXXXXXX; }
uid_of() { [ "$2" -le 100000 ] && printf 'user%05d' "$1" || printf 'user%07d' "$1"; }
declare -A ADD_NEXT DEL_NEXT   # per server: next fresh name for adds, next one to delete

scenario_def() {
  local name=$1 n=$2 mask; mask=$(uid_mask "$n")
  local auth=(-D "$ROOT_DN" -w "$ROOT_PW") readers="ferrodir slapd null" writers="ferrodir slapd"
  SC_WRITE=0; SC_SERVERS=$readers
  case $name in
    base) SC_ARGS=(-e "esearch,randombase,randombaselow=0,randombasehigh=$((n - 1))" -s base
                   -f "objectClass=*" -b "uid=user$mask,ou=people,$SUFFIX") ;;
    same) SC_ARGS=(-e esearch -s base -f "objectClass=*" -b "uid=$(uid_of 42 "$n"),ou=people,$SUFFIX") ;;
    base-user)  # as base, bound as a user: the default rules then differ on its own entry
      SC_SERVERS=$writers
      SC_ARGS=(-D "uid=$(uid_of 1 "$n"),ou=people,$SUFFIX" -w password1
               -e "esearch,randombase,randombaselow=0,randombasehigh=$((n - 1))" -s base
               -f "objectClass=*" -b "uid=user$mask,ou=people,$SUFFIX") ;;
    rootdse) SC_ARGS=(-e esearch -s base -f "objectClass=*" -b "") ;;
    uid-eq) SC_ARGS=(-e esearch,random -s subtree -b "$SUFFIX" -f "uid=user$mask" -r 0 -R $((n - 1))) ;;
    sub10)  # "cn=user DDD*", one digit fewer than N-1 has: DDD and DDD0..DDD9, ~11 entries
      local last=$((n - 1)) digits low high
      digits=$((${#last} - 1))
      low=$((10 ** (digits - 1))); high=$((10 ** digits - 1))
      SC_ARGS=(-e esearch,random -s subtree -b "$SUFFIX" -f "cn=user $(printf 'X%.0s' $(seq $digits))*"
               -r $low -R $high) ;;
    bind) SC_ARGS=("${auth[@]}" -e bindeach,bindonly) ;;
    modify) SC_WRITE=1; SC_SERVERS=$writers
      SC_ARGS=("${auth[@]}" -e "attreplace=description:XXXXXX,random" -b "ou=people,$SUFFIX"
               -f "uid=user$mask" -r 0 -R $((n - 1))) ;;
    add) SC_WRITE=1; SC_SERVERS=$writers ;;     # arguments depend on the server: add_args
    delete) SC_WRITE=1; SC_SERVERS=$writers ;;  # likewise: delete_args
    mixed) SC_SERVERS=$writers ;;
    *) log "unknown scenario $name"; exit 2 ;;
  esac
}

# Adds take fresh names cn=benchNNNNNNN from a per-server counter (commoncounter: the 8
# threads share it); deletes walk the same names from the start, so every delete run
# removes entries an earlier add run created. -I 32 ignores the noSuchObject of the few
# names an add run skipped (a counter value whose add was still in flight at the end).
add_args() {  # KEY [PREFIX]: KEY names the counter pair (the server, or fsync-SERVER)
  SC_ARGS=(-D "$ROOT_DN" -w "$ROOT_PW" -e add,person,incr,noloop,commoncounter
           -b "ou=people,$SUFFIX" -f "cn=${2:-bench}XXXXXXX" -r "${ADD_NEXT[$1]:-0}" -R 9999999)
}
delete_args() {  # KEY [PREFIX]
  SC_ARGS=(-D "$ROOT_DN" -w "$ROOT_PW" -I 32 -e delete,incr,noloop,commoncounter
           -b "ou=people,$SUFFIX" -f "cn=${2:-bench}XXXXXXX" -r "${DEL_NEXT[$1]:-0}" -R $((${ADD_NEXT[$1]:-0} - 1)))
}

port_of() { case $1 in ferrodir) echo $FD_PORT ;; slapd) echo $SL_PORT ;; null) echo $NULL_PORT ;; ferrodir-k) echo $FDK_PORT ;; esac; }
pid_of() { case $1 in ferrodir) echo $FERRODIR_PID ;; slapd) echo $SLAPD_PID ;; null) echo "$NULL_PID" ;; ferrodir-k) echo "$FERRODIR_K_PID" ;; esac; }

record() { $UTIL json "$@" >> "$RAW"; }

value_of() {  # key "k=v k=v" -> v
  local pair; for pair in $2; do [ "${pair%%=*}" = "$1" ] && { echo "${pair#*=}"; return; }; done; echo 0
}

# run_one N SCENARIO SERVER REP THREADS CPUS(client) PINNED TYPE
run_one() {
  local n=$1 sc=$2 server=$3 rep=$4 threads=$5 ccpu=$6 pinned=$7 type=$8
  local port pid file="$OUT/n$1/ldclt/$2-$3-r$4-t$5-$7.out"
  port=$(port_of "$server"); pid=$(pid_of "$server")
  if [ -z "$pid" ]; then
    record type=$type size=$n scenario=$sc server=$server rep=$rep threads=$threads pinned=$pinned \
      na="tools not built"
    return
  fi
  case $sc in add) add_args "$server" ;; delete) delete_args "$server" ;; esac
  ldclt_measure "$file" "$ccpu" "$port" "$pid" "$SAMPLES" "$threads" "${SC_ARGS[@]}"
  record type=$type size=$n scenario=$sc server=$server rep=$rep threads=$threads pinned=$pinned $MEASURE
  local total; total=$(value_of ops_total "$MEASURE")
  # Leave a gap after the names used, for adds still in flight when the sample ended (at
  # most one per thread); deletes walk the gap and count its noSuchObject as ignored.
  case $sc in add) ADD_NEXT[$server]=$((ADD_NEXT[$server] + total + 2 * CLIENT_THREADS)) ;;
              delete) DEL_NEXT[$server]=$((DEL_NEXT[$server] + total)) ;; esac
  log "  n=$n $sc $server rep $rep t=$threads $pinned: $(value_of ops_per_s "$MEASURE") ops/s errors=$(value_of errors "$MEASURE")"
}

# Mixed load: 8 search threads and 2 modify threads, two ldclt processes at once.
run_mixed() {  # N SERVER REP
  local n=$1 server=$2 rep=$3 port pid before after search modify d="$OUT/n$1/ldclt"
  port=$(port_of "$server"); pid=$(pid_of "$server")
  before=$($UTIL cpu "$pid")
  scenario_def base "$n"; ldclt_start "$d/mixed-search-$server-r$rep.out" $CLIENT_CPU "$port" "$SAMPLES" 8 "${SC_ARGS[@]}"
  local search_pid=$LDCLT_PID
  scenario_def modify "$n"; ldclt_start "$d/mixed-modify-$server-r$rep.out" $CLIENT_CPU "$port" "$SAMPLES" 2 "${SC_ARGS[@]}"
  wait "$search_pid" || true; wait "$LDCLT_PID" || true
  after=$($UTIL cpu "$pid")
  search=$($UTIL ldclt "$d/mixed-search-$server-r$rep.out" 2>/dev/null)
  modify=$($UTIL ldclt "$d/mixed-modify-$server-r$rep.out" 2>/dev/null)
  record type=run size=$n scenario=mixed server=$server rep=$rep threads=10 pinned=pinned \
    search_ops_per_s=$(value_of ops_per_s "$search") modify_ops_per_s=$(value_of ops_per_s "$modify") \
    ops_per_s=$(python3 -c "print($(value_of ops_per_s "$search")+$(value_of ops_per_s "$modify"))") \
    ops_total=$(( $(value_of ops_total "$search") + $(value_of ops_total "$modify") )) \
    errors=$(( $(value_of errors "$search") + $(value_of errors "$modify") )) $(cpu_delta "$before" "$after")
  log "  n=$n mixed $server rep $rep: search $(value_of ops_per_s "$search") modify $(value_of ops_per_s "$modify") ops/s"
}

# fsync+fdatasync per acknowledged write: strace attached to every thread of the server
# for one 10-s sample (it slows the server a lot; only the ratio calls/ops is used).
count_syncs() {  # N SCENARIO SERVER
  local n=$1 sc=$2 server=$3 port pid file="$OUT/n$1/strace-$2-$3.txt" spid
  port=$(port_of "$server"); pid=$(pid_of "$server")
  case $sc in
    modify) scenario_def modify "$n" ;;
    add) add_args "fsync-$server" fsync ;;      # names of their own: the pools of the
    delete) delete_args "fsync-$server" fsync ;;  # timed runs are left as they are
  esac
  strace -f -c -e trace=fsync,fdatasync,sync_file_range,msync -p "$pid" -o "$file" 2>/dev/null &
  spid=$!; track $spid; sleep 1
  ldclt_measure "$file.ldclt" $CLIENT_CPU "$port" "$pid" 1 $CLIENT_THREADS "${SC_ARGS[@]}"
  kill -INT "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
  local total; total=$(value_of ops_total "$MEASURE")
  case $sc in add) ADD_NEXT[fsync-$server]=$((${ADD_NEXT[fsync-$server]:-0} + total + 2 * CLIENT_THREADS)) ;; esac
  record type=fsync size=$n scenario=$sc server=$server ops_total=$total \
    errors=$(value_of errors "$MEASURE") $($UTIL strace "$file")
}

latency() {  # N SERVER
  local n=$1 server=$2 file="$OUT/n$1/latency-$2.json" tmpl
  if [ -z "$TOOLS_DIR" ] || [ -z "$(pid_of "$server")" ]; then
    record type=latency size=$n server=$server na="tools not built"; return
  fi
  [ "$n" -le 100000 ] && tmpl='uid=user{:05},ou=people,dc=example,dc=com' || tmpl='uid=user{:07},ou=people,dc=example,dc=com'
  taskset -c $CLIENT_CPU timeout 40 "$TOOLS_DIR/ldap-latency" --url "ldap://127.0.0.1:$(port_of "$server")" \
    --mode base --base-template "$tmpl" --range "0..$n" --connections $CLIENT_THREADS \
    --duration-s 10 > "$file" 2>&1 &
  local lpid=$!; track $lpid; wait $lpid || true
  echo "{\"type\":\"latency\",\"size\":$n,\"server\":\"$server\",\"result\":$($UTIL latency "$file")}" >> "$RAW"
}

# --- 2. data and servers, one size at a time -------------------------------------------
bench_size() {
  local n=$1 d="$OUT/n$1"
  mkdir -p "$d/ldclt"
  SLAPD_MAXSIZE=$(slapd_maxsize_for "$n")
  log "N=$n: generating data"
  # Issue #11: the same entries for both servers, but slapd's copy carries the memberOf
  # values its overlay would have written (slapadd bypasses overlays); ferrodir computes
  # memberOf itself and refuses it in the data (NO-USER-MODIFICATION).
  local slapd_ldif=$d/data.ldif
  if [ "$ISSUE11" = 1 ]; then
    slapd_ldif=$d/data-slapd.ldif
    python3 bench/gen-data.py "$n" --issue11 --memberof > "$slapd_ldif"
    grep -v '^memberOf: ' "$slapd_ldif" > "$d/data.ldif"
  else
    python3 bench/gen-data.py "$n" > "$d/data.ldif"
  fi
  tls_setup "$n"   # before the configs are written: they name the certificate
  local entries; entries=$(grep -c '^dn: ' "$d/data.ldif")
  read -r secs bytes < <(load_ferrodir "$d/ferrodir" "$d/data.ldif" "$n" "$SHARDS")
  record type=load size=$n server=ferrodir entries=$entries seconds=$secs bytes=$bytes shards=$SHARDS
  read -r secs bytes < <(load_slapd "$d/slapd" "$slapd_ldif")
  record type=load size=$n server=slapd entries=$entries seconds=$secs bytes=$bytes
  log "N=$n: loaded; starting servers on CPU $SERVER_CPU"
  start_ferrodir "$d/ferrodir" $FD_PORT $SERVER_CPU
  start_slapd "$d/slapd" $SL_PORT $SERVER_CPU
  start_null "$d" $NULL_PORT $SERVER_CPU 1
  warm_read $FD_PORT; warm_read $SL_PORT
  if [ -n "$COMPARE_SHARDS" ]; then
    # The same data with COMPARE_SHARDS shards, on the same CPU: what the fan-out costs.
    local main_pid=$FERRODIR_PID
    read -r secs bytes < <(load_ferrodir "$d/ferrodir-k" "$d/data.ldif" "$n" "$COMPARE_SHARDS")
    record type=load size=$n server=ferrodir-k entries=$entries seconds=$secs bytes=$bytes shards=$COMPARE_SHARDS
    start_ferrodir "$d/ferrodir-k" $FDK_PORT $SERVER_CPU
    FERRODIR_K_PID=$FERRODIR_PID; FERRODIR_PID=$main_pid
    warm_read $FDK_PORT
  fi
  record type=rss size=$n server=ferrodir vmrss_kb=$(vmrss_kb $FERRODIR_PID) rssanon_kb=$(rssanon_kb $FERRODIR_PID)
  record type=rss size=$n server=slapd vmrss_kb=$(vmrss_kb $SLAPD_PID) rssanon_kb=$(rssanon_kb $SLAPD_PID)
  check_sub10 "$n"
  ADD_NEXT[ferrodir]=0; ADD_NEXT[slapd]=0; DEL_NEXT[ferrodir]=0; DEL_NEXT[slapd]=0; WRITES_DONE=0

  if [ "$SCENARIOS" = smoke ]; then smoke "$n"; return; fi
  local sc rep server
  for sc in ${SCENARIOS//,/ }; do
    if [ "$sc" = isolation ]; then isolation "$n"; continue; fi
    if [ "$sc" = tls ]; then tls_scenario "$n"; continue; fi
    case $sc in paged|sorted|memberof) issue11_scenario "$n" "$sc"; continue ;; esac
    case $sc in add|delete) WRITES_DONE=1 ;; esac
    scenario_def "$sc" "$n"
    case $sc in base|uid-eq|sub10) [ -z "$COMPARE_SHARDS" ] || SC_SERVERS+=" ferrodir-k" ;; esac
    log "N=$n scenario $sc"
    for rep in $(seq "$REPS"); do
      for server in $SC_SERVERS; do
        if [ "$sc" = mixed ]; then run_mixed "$n" "$server" "$rep"
        else run_one "$n" "$sc" "$server" "$rep" $CLIENT_THREADS $CLIENT_CPU pinned run; fi
      done
    done
  done
  # The latency runs belong to the ldclt throughput scenarios; a run of isolation, tls or
  # issue #11's scenarios alone skips them (those measure latency with their own client).
  local ldclt_scenarios=0
  for sc in ${SCENARIOS//,/ }; do
    case $sc in isolation|tls|paged|sorted|memberof) ;; *) ldclt_scenarios=1 ;; esac
  done
  if [ $ldclt_scenarios = 1 ]; then
    for server in ferrodir slapd null; do latency "$n" "$server"; done
  fi
  # Issue #14: memory once the runs have filled the caches too (the entry cache fills
  # from lookups, not from the full read).
  record type=rss-end size=$n server=ferrodir vmrss_kb=$(vmrss_kb $FERRODIR_PID) rssanon_kb=$(rssanon_kb $FERRODIR_PID)
  record type=rss-end size=$n server=slapd vmrss_kb=$(vmrss_kb $SLAPD_PID) rssanon_kb=$(rssanon_kb $SLAPD_PID)
  for sc in modify add delete; do
    case ",$SCENARIOS," in *",$sc,"*) ;; *) continue ;; esac
    for server in ferrodir slapd; do count_syncs "$n" "$sc" "$server"; done
  done
  [ $MATRIX = 1 ] && matrix "$n"
  stop_all
  # The databases are large (150 MB at 10k); the measurements do not need them.
  [ "${KEEP_DATA:-0}" = 1 ] || rm -rf "$d/ferrodir/data" "$d/ferrodir-k/data" "$d/slapd/db" "$d/data.ldif" "$d/data-slapd.ldif"
}

# The 10-entry scenario is only honest if both servers return the same ~10 entries: a
# difference, a failed search or no entries at all stops the run (smoke pass included)
# before anything is measured.
check_sub10() {
  local n=$1 f s
  scenario_def sub10 "$n"
  local filter="${SC_ARGS[7]//X/1}"
  f=$(count_entries "$FD_PORT" "($filter)") || f="failed"
  s=$(count_entries "$SL_PORT" "($filter)") || s="failed"
  record type=check size=$n what="entries matching ($filter)" ferrodir=$f slapd=$s
  if [ "$f" != "$s" ] || [ "$f" = failed ] || [ "$f" = 0 ]; then
    log "FAIL: ($filter) gives $f entries on ferrodir, $s on slapd: the sub10 scenario would compare different work"
    exit 1
  fi
}

# Prints how many entries a search for $2 on port $1 returns; fails if ldapsearch fails.
count_entries() {
  local out
  out=$("$LDAPSEARCH" -x -H "ldap://127.0.0.1:$1" -b "$SUFFIX" "$2" 1.1) || return 1
  printf '%s\n' "$out" | grep -c '^dn:' || true
}

# --- 5. the matrix: client threads x pinning, for information ---------------------------
matrix() {
  local n=$1 pinned threads sc server rep
  for pinned in pinned unpinned; do
    local cpus=$CLIENT_CPU
    if [ $pinned = unpinned ]; then
      cpus=""
      for server in ferrodir slapd null; do
        [ -n "$(pid_of $server)" ] && taskset -a -p -c 0,1 "$(pid_of $server)" >/dev/null
      done
    fi
    for threads in ${MATRIX_THREADS//,/ }; do
      for sc in ${MATRIX_SCENARIOS//,/ }; do
        scenario_def "$sc" "$n"
        # Interleaved repetitions, as the main table's: drift hits every server alike.
        for rep in $(seq 1 "$MATRIX_REPS"); do
          for server in ferrodir slapd null; do run_one "$n" "$sc" "$server" "$rep" "$threads" "$cpus" $pinned matrix; done
        done
      done
    done
  done
  for server in ferrodir slapd null; do
    [ -n "$(pid_of $server)" ] && taskset -a -p -c $SERVER_CPU "$(pid_of $server)" >/dev/null
  done
}

# --- 6. isolation (issue #9): does an unindexed scan stall the server's other work? ------
# Phases, each ISO_DURATION s, both servers one after the other (same data, same seed):
# C x K = C anonymous connections with K subtree scans each outstanding at once, filter
# (description=nomatch) (unindexed on both servers, matches nothing), each re-issued when
# its SearchResultDone arrives; beside them one probe connection bound as the rootDN does
# base lookups (ISO_LOOKUP_RATE/s) and durable modifies of description (ISO_MODIFY_RATE/s);
# the scans go on until the probe's last operation is answered (at most ISO_GRACE s more).
# Between phases the harness waits (up to ISO_DRAIN_MAX s) until the server just measured
# is idle, so scans it still runs for closed connections do not land in the next phase.
# Then the stop run (ferrodir only): ferrodir restarted with the ferrodir::search_stop
# debug lines on, scans stopped by Abandon, a close, sizeLimit=1 and timeLimit=1; the stop
# latency comes from its log (slapd's cannot be observed).
ISO_DURATION=${ISO_DURATION:-20}
ISO_GRACE=${ISO_GRACE:-10}  # the probe's last operation may finish this long after, under load
ISO_PHASES=${ISO_PHASES:-"4x1 16x1 1x16"}
ISO_SCAN_FILTER=${ISO_SCAN_FILTER:-"description=nomatch"}  # attr=value: unindexed, matching nothing
ISO_LOOKUP_RATE=${ISO_LOOKUP_RATE:-20}
ISO_MODIFY_RATE=${ISO_MODIFY_RATE:-10}
ISO_STOP_DURATION=${ISO_STOP_DURATION:-20}
ISO_DRAIN_MAX=${ISO_DRAIN_MAX:-120}
ISO_STOP_LOG_LEVEL="info,ferrodir::search_stop=debug"

isolation() {  # N
  local n=$1 d="$OUT/n$1/isolation" tmpl rep phase server
  mkdir -p "$d"
  if [ -z "$TOOLS_DIR" ]; then
    record type=isolation size=$n na="tools not built"; return
  fi
  [ "$n" -le 100000 ] && tmpl='uid=user{:05},ou=people,dc=example,dc=com' \
                      || tmpl='uid=user{:07},ou=people,dc=example,dc=com'
  for rep in $(seq "$REPS"); do
    for phase in $ISO_PHASES; do
      for server in ferrodir slapd; do iso_load "$n" "$server" "$phase" "$rep" "$tmpl"; done
    done
  done
  [ "$ISO_STOP_DURATION" = 0 ] || iso_stop "$n"
}

iso_load() {  # N SERVER PHASE(CxK) REP TEMPLATE
  local n=$1 server=$2 phase=$3 rep=$4 tmpl=$5 pid port before after drain cpu
  local file="$OUT/n$n/isolation/load-$phase-$server-r$rep.json"
  pid=$(pid_of "$server"); port=$(port_of "$server")
  log "  n=$n isolation $phase $server rep $rep (${ISO_DURATION} s)"
  before=$($UTIL cpu "$pid")
  taskset -c $CLIENT_CPU timeout -k 5 $((ISO_DURATION + ISO_GRACE + 30)) "$TOOLS_DIR/ldap-isolation" --mode load \
    --url "ldap://127.0.0.1:$port" --base "$SUFFIX" --duration-s "$ISO_DURATION" \
    --grace-s "$ISO_GRACE" --scan-connections "${phase%x*}" --scans-per-connection "${phase#*x}" \
    --lookup-rate "$ISO_LOOKUP_RATE" --modify-rate "$ISO_MODIFY_RATE" --scan-filter "$ISO_SCAN_FILTER" \
    --base-template "$tmpl" --range "0..$n" --bind-dn "$ROOT_DN" --password "$ROOT_PW" \
    --seed "$rep" > "$file" 2>"$file.stderr" &
  local tpid=$!; track $tpid; wait $tpid || log "  ldap-isolation failed: $(tail -1 "$file.stderr")"
  after=$($UTIL cpu "$pid")
  cpu=$(cpu_delta "$before" "$after")
  drain=$($UTIL idle "$pid" "$ISO_DRAIN_MAX")
  echo "{\"type\":\"isolation\",\"size\":$n,\"phase\":\"$phase\",\"server\":\"$server\",\"rep\":$rep,\"drain_s\":$drain,$($UTIL json $cpu | sed 's/^{//; s/}$//'),\"result\":$($UTIL latency "$file")}" >> "$RAW"
  log "    $(python3 -c 'import json, sys; g = json.loads(sys.argv[1]).get; print("scans/s", g("scans_per_s"), "lookup p99", g("lookup_p99_us"), "us, modify p99", g("modify_p99_us"), "us, errors", g("errors"))' "$($UTIL latency "$file")"); drained in $drain s"
}

iso_stop() {  # N: ferrodir only, restarted with the stop lines logged, then restarted as before
  local n=$1 d="$OUT/n$1/ferrodir" file="$OUT/n$1/isolation/stop-ferrodir.json" i
  log "  n=$n isolation stop run on ferrodir (${ISO_STOP_DURATION} s)"
  stop_pid "$FERRODIR_PID"
  i=1; while [ -e "$d/serve-$i.log" ]; do i=$((i + 1)); done
  mv "$d/serve.log" "$d/serve-$i.log"
  sed -i "s/^level = .*/level = \"$ISO_STOP_LOG_LEVEL\"/" "$d/ferrodir.toml"
  # RUST_LOG would override the configured filter: off for this start only.
  local rust_log=${RUST_LOG-} had_rust_log=${RUST_LOG+1}
  unset RUST_LOG
  start_ferrodir "$d" $FD_PORT $SERVER_CPU
  [ -n "$had_rust_log" ] && export RUST_LOG=$rust_log
  warm_read $FD_PORT
  taskset -c $CLIENT_CPU timeout -k 5 $((ISO_STOP_DURATION + 60)) "$TOOLS_DIR/ldap-isolation" --mode stop \
    --url "ldap://127.0.0.1:$FD_PORT" --base "$SUFFIX" --duration-s "$ISO_STOP_DURATION" \
    > "$file" 2>"$file.stderr" &
  local tpid=$!; track $tpid; wait $tpid || log "  ldap-isolation --mode stop failed: $(tail -1 "$file.stderr")"
  $UTIL idle "$FERRODIR_PID" "$ISO_DRAIN_MAX" >/dev/null
  local stops; stops=$($UTIL stoplog "$d/serve.log")
  echo "{\"type\":\"isolation_stop\",\"size\":$n,\"server\":\"ferrodir\",\"result\":$($UTIL latency "$file"),\"stop_lines\":$stops}" >> "$RAW"
  log "    stop lines: $stops"
  # Back to the configuration the other scenarios use.
  stop_pid "$FERRODIR_PID"
  mv "$d/serve.log" "$d/serve-stop.log"
  sed -i 's/^level = .*/level = "warn"/' "$d/ferrodir.toml"
  start_ferrodir "$d" $FD_PORT $SERVER_CPU
}

# --- 8. TLS (issue #10): the same client (ldap-latency over rustls) against both servers -
# Per key type in TLS_KEYS (a fresh CA and server certificate from make_tls_pki, the same
# files for both servers), per repetition, per measure, ferrodir then slapd:
#   lookup        random base lookups over TLS_CONNECTIONS established LDAPS connections
#   bind          a new LDAPS connection per operation: TCP connect, full TLS handshake (no
#                 resumption), simple bind as the rootDN, Unbind, close
#   starttls-bind the same with StartTLS on the plain port instead of LDAPS
#   plain-lookup, plain-bind   the same over plain LDAP, for the cost of TLS itself (first
#                 key type only: they do not depend on the certificate)
# TLS_DURATION s each, the client on CPU 1 (one tokio thread), the server's CPU time read
# before and after. Changing the key type restarts both servers and reads everything once.
TLS_KEYS=${TLS_KEYS:-"rsa ecdsa"}
TLS_MEASURES=${TLS_MEASURES:-"lookup bind plain-lookup plain-bind"}
TLS_DURATION=${TLS_DURATION:-10}
TLS_CONNECTIONS=${TLS_CONNECTIONS:-8}
TLS_KEY_NOW=""

tls_setup() {  # N: certificates for every key type, the first one installed, if tls is asked
  local n=$1 d="$OUT/n$1/tls" key
  case ",$SCENARIOS," in *,tls,*) ;; *) TLS_DIR=""; return ;; esac
  for key in $TLS_KEYS; do make_tls_pki "$d/$key" "$key"; done
  TLS_DIR=$d/current; mkdir -p "$TLS_DIR"
  tls_install "${TLS_KEYS%% *}"
}

tls_install() {  # KEY: copy that key type's files where both servers' configs point
  local key=$1 f
  for f in ca.pem server.pem server.key; do cp "$TLS_DIR/../$key/$f" "$TLS_DIR/$f"; done
  TLS_KEY_NOW=$key
}

tls_restart() {  # N: both servers again, on the files installed now
  local d="$OUT/n$1"
  stop_pid "$FERRODIR_PID"; stop_pid "$SLAPD_PID"
  start_ferrodir "$d/ferrodir" $FD_PORT $SERVER_CPU
  start_slapd "$d/slapd" $SL_PORT $SERVER_CPU
  warm_read $FD_PORT; warm_read $SL_PORT
}

tls_scenario() {  # N
  local n=$1 key rep measure server first=1
  if [ -z "$TOOLS_DIR" ]; then record type=tls size=$n na="tools not built"; return; fi
  for key in $TLS_KEYS; do
    if [ "$key" != "$TLS_KEY_NOW" ]; then tls_install "$key"; tls_restart "$n"; fi
    log "N=$n scenario tls, $key certificate: $(openssl x509 -in "$TLS_DIR/server.pem" -noout -text | grep -m1 'Public Key Algorithm' | sed 's/.*: //')"
    for rep in $(seq "$REPS"); do
      for measure in $TLS_MEASURES; do
        case $measure in plain-*) [ $first = 1 ] || continue ;; esac
        for server in ferrodir slapd; do tls_one "$n" "$key" "$measure" "$server" "$rep"; done
      done
    done
    first=0
  done
}

tls_one() {  # N KEY MEASURE SERVER REP
  local n=$1 key=$2 measure=$3 server=$4 rep=$5 url tmpl pid before after args
  local file="$OUT/n$n/tls/$measure-$key-$server-r$rep.json"
  pid=$(pid_of "$server")
  local ldaps_port=$FD_LDAPS_PORT; [ "$server" = slapd ] && ldaps_port=$SL_LDAPS_PORT
  [ "$n" -le 100000 ] && tmpl='uid=user{:05},ou=people,dc=example,dc=com' || tmpl='uid=user{:07},ou=people,dc=example,dc=com'
  case $measure in
    lookup) args=(--url "ldaps://127.0.0.1:$ldaps_port" --mode base) ;;
    bind) args=(--url "ldaps://127.0.0.1:$ldaps_port" --mode connect-bind) ;;
    starttls-bind) args=(--url "ldap://127.0.0.1:$(port_of "$server")" --starttls --mode connect-bind) ;;
    plain-lookup) args=(--url "ldap://127.0.0.1:$(port_of "$server")" --mode base) ;;
    plain-bind) args=(--url "ldap://127.0.0.1:$(port_of "$server")" --mode connect-bind) ;;
    *) log "unknown TLS measure $measure"; exit 2 ;;
  esac
  case $measure in *bind) args+=(--bind-dn "$ROOT_DN" --password "$ROOT_PW") ;; esac
  case $measure in plain-*) ;; *) args+=(--ca-file "$TLS_DIR/ca.pem") ;; esac
  before=$($UTIL cpu "$pid")
  taskset -c $CLIENT_CPU timeout -k 5 $((TLS_DURATION + 40)) "$TOOLS_DIR/ldap-latency" "${args[@]}"     --base-template "$tmpl" --range "0..$n" --connections "$TLS_CONNECTIONS"     --duration-s "$TLS_DURATION" > "$file" 2>"$file.stderr" &
  local lpid=$!; track $lpid; wait $lpid || log "  ldap-latency failed: $(tail -1 "$file.stderr")"
  after=$($UTIL cpu "$pid")
  local result; result=$($UTIL latency "$file")
  echo "{\"type\":\"tls\",\"size\":$n,\"key\":\"$key\",\"measure\":\"$measure\",\"server\":\"$server\",\"rep\":$rep,$($UTIL json $(cpu_delta "$before" "$after") | sed 's/^{//; s/}$//'),\"result\":$result}" >> "$RAW"
  log "  n=$n tls $key $measure $server rep $rep: $(python3 -c 'import json, sys; g = json.loads(sys.argv[1]).get; print(g("ops_per_s"), "ops/s, p50", g("p50_us"), "p99", g("p99_us"), "us, errors", g("errors"), "|", g("tls"))' "$result")"
}

# --- 9. issue #11: paged results, server-side sort, memberOf ----------------------------
# ldap-search-load (bench/tools; ldclt sends neither control) against both servers, bound
# as the rootDN (no size limit on either), every control critical, all user attributes
# returned; per repetition and measure, ferrodir then slapd, I11_DURATION s each, the
# client on CPU 1, the server's CPU time read before and after:
#   paged     the whole ou=people subtree, (objectClass=*), pages of I11_PAGE_SIZE, one
#             connection; an operation is one full pass (N users + ou=people)
#   sorted    (departmentNumber=7): 1,000 users spread over the id range (gen-data.py
#             --issue11), sorted by cn:caseIgnoreOrderingMatch (cn has no ORDERING rule
#             of its own: sssvlv refuses a key without one, inappropriateMatching)
#   memberof  (memberOf=cn=big1000,ou=groups,...): a group of exactly 1,000 users, itself
#             nested in cn=nest-outer (in cn=nest-top), so direct and transitive agree
# Measures: load (I11_CONNECTIONS connections, one search in flight on each; paged: one)
# and latency (one connection). Before timing, one checked operation per server (every
# entry decoded): the count, the set of DNs (and for sorted their order) must be slapd's
# and right; a server that refuses the control or answers wrongly gets `na` with the reason
# instead of a number, and the run goes on.
I11_DURATION=${I11_DURATION:-10}
I11_PAGE_SIZE=${I11_PAGE_SIZE:-1000}
I11_CONNECTIONS=${I11_CONNECTIONS:-8}
I11_MEASURES=${I11_MEASURES:-"load latency"}
I11_SORT_KEY=${I11_SORT_KEY:-cn:caseIgnoreOrderingMatch}
I11_DEPARTMENT=7
declare -A I11_NA I11_EXPECT

# issue11_args N SCENARIO -> I11_ARGS (ldap-search-load's search arguments), I11_WANT
# (the entries a right answer has), I11_ORDER (1: the order is part of the answer)
issue11_args() {
  local n=$1 departments=$(( $1 / 1000 > 0 ? $1 / 1000 : 1 )) dept
  I11_ORDER=0
  case $2 in
    paged) I11_ARGS=(--base "ou=people,$SUFFIX" --filter "(objectClass=*)" --page-size "$I11_PAGE_SIZE")
           I11_WANT=$((n + 1)) ;;
    sorted) dept=$((I11_DEPARTMENT % departments))
            I11_ARGS=(--base "ou=people,$SUFFIX" --filter "(departmentNumber=$dept)" --sort "$I11_SORT_KEY")
            I11_WANT=$(( (n - dept + departments - 1) / departments )); I11_ORDER=1 ;;
    memberof) I11_ARGS=(--base "$SUFFIX" --filter "(memberOf=cn=big1000,ou=groups,$SUFFIX)")
              I11_WANT=$(( n < 1000 ? n : 1000 )) ;;
  esac
}

issue11_scenario() {  # N SCENARIO
  local n=$1 sc=$2 d="$OUT/n$1/issue11" rep measure server
  mkdir -p "$d"
  if [ -z "$TOOLS_DIR" ]; then record type=issue11 size=$n scenario=$sc na="tools not built"; return; fi
  issue11_args "$n" "$sc"
  log "N=$n scenario $sc: ${I11_ARGS[*]}"
  issue11_check "$n" "$sc"
  for rep in $(seq "$REPS"); do
    for measure in $I11_MEASURES; do
      [ "$sc" = paged ] && [ "$measure" = latency ] && continue  # paged has one connection anyway
      for server in ferrodir slapd; do issue11_one "$n" "$sc" "$measure" "$server" "$rep"; done
    done
  done
}

# One checked operation per server; sets I11_NA[server] when there is nothing right to time.
issue11_check() {  # N SCENARIO
  local n=$1 sc=$2 d="$OUT/n$1/issue11" server want=$I11_WANT
  # Writes earlier in this run changed ou=people: slapd's count is the reference then.
  for server in slapd ferrodir; do
    taskset -c $CLIENT_CPU timeout 300 "$TOOLS_DIR/ldap-search-load" --check \
      --url "ldap://127.0.0.1:$(port_of "$server")" --bind-dn "$ROOT_DN" --password "$ROOT_PW" \
      "${I11_ARGS[@]}" > "$d/check-$sc-$server.json" 2> "$d/check-$sc-$server.stderr" || true
  done
  [ "$sc" = paged ] && [ "${WRITES_DONE:-0}" = 1 ] && want=""
  local verdicts
  verdicts=$(python3 - "$d/check-$sc-slapd.json" "$d/check-$sc-ferrodir.json" "$want" "$I11_ORDER" <<'PY'
import json, sys
def load(path):
    try:
        return json.loads(open(path).read().strip().splitlines()[-1])
    except Exception:
        return None
slapd, ferrodir = load(sys.argv[1]), load(sys.argv[2])
want = int(sys.argv[3]) if sys.argv[3] else (slapd or {}).get("entries")
order = sys.argv[4] == "1"
def verdict(mine, ref):
    if mine is None:
        return "no answer (see the check's stderr)"
    code = mine["result_code"]
    if code == 12:
        return "control refused (unavailableCriticalExtension, 12)"
    if code:
        return f"resultCode {code}: {mine['diagnostic']}"[:120]
    if mine.get("sort_result"):
        return f"sortResult {mine['sort_result']}"
    if mine["entries"] != want:
        return f"wrong answer: {mine['entries']} entries, expected {want}"
    if order and mine.get("in_order") is not True:
        return "wrong answer: entries not in sort order"
    if ref is not None and ref is not mine:
        key = "order_digest" if order else "set_digest"
        if mine[key] != ref[key]:
            return "wrong answer: not slapd's entries" + (" in slapd's order" if order else "")
    return "ok"
s = verdict(slapd, None)
f = verdict(ferrodir, slapd if s == "ok" else None)
print(f"slapd={s.replace(' ', '_')}")
print(f"ferrodir={f.replace(' ', '_')}")
print(f"counts={(slapd or {}).get('entries')}/{(ferrodir or {}).get('entries')}/{want}")
PY
)
  local line counts
  I11_NA[slapd]=""; I11_NA[ferrodir]=""
  for line in $verdicts; do
    case $line in
      counts=*) counts=${line#counts=} ;;
      *=ok) I11_EXPECT[${line%%=*}]=${want:-$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["entries"])' "$d/check-$sc-slapd.json")} ;;
      *) I11_NA[${line%%=*}]="na: $(echo "${line#*=}" | tr _ ' ')" ;;
    esac
  done
  local slapd_count ferrodir_count
  IFS=/ read -r slapd_count ferrodir_count _ <<< "$counts"
  record type=check size=$n what="$sc: ${I11_ARGS[*]}" ferrodir="$ferrodir_count" slapd="$slapd_count" \
    expected="${want:-slapd}" ferrodir_verdict="${I11_NA[ferrodir]:-ok}" slapd_verdict="${I11_NA[slapd]:-ok}"
  log "  check $sc: slapd ${I11_NA[slapd]:-ok}, ferrodir ${I11_NA[ferrodir]:-ok} (entries slapd/ferrodir/expected $counts)"
}

issue11_one() {  # N SCENARIO MEASURE SERVER REP
  local n=$1 sc=$2 measure=$3 server=$4 rep=$5 pid before after connections=1
  local file="$OUT/n$n/issue11/$sc-$measure-$server-r$rep.json"
  if [ -n "${I11_NA[$server]}" ]; then
    record type=issue11 size=$n scenario=$sc measure=$measure server=$server rep=$rep na="${I11_NA[$server]}"
    return
  fi
  [ "$measure" = load ] && [ "$sc" != paged ] && connections=$I11_CONNECTIONS
  pid=$(pid_of "$server")
  before=$($UTIL cpu "$pid")
  taskset -c $CLIENT_CPU timeout -k 5 $((I11_DURATION + 120)) "$TOOLS_DIR/ldap-search-load" \
    --url "ldap://127.0.0.1:$(port_of "$server")" --bind-dn "$ROOT_DN" --password "$ROOT_PW" \
    "${I11_ARGS[@]}" --expect-entries "${I11_EXPECT[$server]}" --connections "$connections" \
    --duration-s "$I11_DURATION" > "$file" 2>"$file.stderr" &
  local lpid=$!; track $lpid; wait $lpid || log "  ldap-search-load failed: $(tail -1 "$file.stderr")"
  after=$($UTIL cpu "$pid")
  local result; result=$($UTIL latency "$file")
  echo "{\"type\":\"issue11\",\"size\":$n,\"scenario\":\"$sc\",\"measure\":\"$measure\",\"server\":\"$server\",\"rep\":$rep,\"connections\":$connections,$($UTIL json $(cpu_delta "$before" "$after") | sed 's/^{//; s/}$//'),\"result\":$result}" >> "$RAW"
  log "  n=$n $sc $measure $server rep $rep: $(python3 -c 'import json, sys; g = json.loads(sys.argv[1]).get; print(g("ops_per_s"), "ops/s,", g("entries_per_s"), "entries/s, p50", g("p50_us"), "p99", g("p99_us"), "us, errors", g("errors"), g("first_error") or "")' "$result")"
}

# --- 7. smoke: both servers at once (it checks answers, not speed) ----------------------
smoke() {
  local n=$1 server sc pids=() failed=0
  for sc in base modify; do
    scenario_def "$sc" "$n"
    for server in ferrodir slapd; do
      ldclt_start "$OUT/n$n/ldclt/smoke-$sc-$server.out" "" "$(port_of $server)" 1 4 "${SC_ARGS[@]}"
      pids+=($LDCLT_PID)
    done
    for pid in "${pids[@]}"; do wait "$pid" || true; done; pids=()
    for server in ferrodir slapd; do
      local m; m=$($UTIL ldclt "$OUT/n$n/ldclt/smoke-$sc-$server.out" 2>&1 | head -1)
      record type=run size=$n scenario=$sc server=$server rep=1 threads=4 pinned=unpinned $m
      if [ "$(value_of errors "$m")" != 0 ] || [ "$(value_of ops_total "$m")" = 0 ]; then
        log "SMOKE FAIL: $sc on $server: $m"; failed=1
      else log "smoke ok: $sc on $server: $(value_of ops_per_s "$m") ops/s"; fi
    done
  done
  stop_all
  [ $failed = 0 ] || { log "smoke test failed; ldclt output in $OUT/n$n/ldclt"; exit 1; }
}

# --- run -------------------------------------------------------------------------------
$UTIL json type=meta started="$(date -Is)" host="$(hostname)" cpus="$(nproc)" \
  ferrodir_version="$($FERRODIR --version 2>/dev/null | head -1 || echo ?)" \
  slapd_version="$("$SLAPD" -VV 2>&1 | head -1 | sed 's/.*slapd \([0-9.]*\).*/\1/')" \
  reps=$REPS samples=$SAMPLES shards=$SHARDS compare_shards="$COMPARE_SHARDS" scenarios="$SCENARIOS" quick=$QUICK \
  command="bash bench/run.sh $ORIG_ARGS" tools="${TOOLS_DIR:+built}" >> "$RAW"
for n in ${SIZES//,/ }; do bench_size "$n"; done
python3 bench/lib/report.py "$RAW" "$OUT/results.json" "$OUT/results.md"
cat "$OUT/results.md"
log "results in $OUT"
