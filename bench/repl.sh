#!/usr/bin/env bash
# Replication benchmarks (issue #13): a slapd 2.5 consumer (back-mdb, syncrepl
# refreshAndPersist) of slapd's own provider (back-mdb + syncprov with a session log) and
# of ferrodir's, on the same data, with the same consumer configuration, in the same run.
#
#   bash bench/repl.sh                       # 100k entries, 1 repetition
#   bash bench/repl.sh --entries 10000 --reps 2 --lag-rate 100 --lag-seconds 20
#
# Scenarios, per provider (slapd, then ferrodir; with --reps R the pairs alternate):
#   refresh  an empty consumer started against the loaded provider: seconds until its
#            suffix shows the provider's contextCSN and holds as many entries.
#   lag      that consumer persisting; ldap-repl-lag writes `description` on the provider at
#            --lag-rate writes/s for --lag-seconds, one request at a time, and times every
#            5th write until the consumer shows it: p50, p99, max in ms.
#   read     random base lookups on the provider (ldclt, 8 threads, --read-seconds) under
#            the same write load, with that one consumer and then with 4 consumers
#            persisting (3 more, started from copies of the first consumer's database, so
#            they only catch up).
# Consumers run with dbnosync (stated in BENCHMARKS.md): what is measured is the provider;
# the consumer is the same program either way. The providers' durability is their
# benchmark default (slapd fdatasync per commit, ferrodir "power-loss").
# Options: --entries N (default 100000), --reps R (1), --lag-rate W (100), --lag-seconds S
# (30), --read-seconds S (10), --shards K (ferrodir, 2), --out DIR, --no-build.
# Every process started here is stopped by PID on exit. Nothing is pinned.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib/common.sh

ENTRIES=100000; REPS=1; LAG_RATE=100; LAG_SECONDS=30; READ_SECONDS=10; SHARDS=2; BUILD=1; OUT_DIR=""
while [ $# -gt 0 ]; do
  case $1 in
    --entries) ENTRIES=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --lag-rate) LAG_RATE=$2; shift ;;
    --lag-seconds) LAG_SECONDS=$2; shift ;;
    --read-seconds) READ_SECONDS=$2; shift ;;
    --shards) SHARDS=$2; shift ;;
    --out) OUT_DIR=$2; shift ;;
    --no-build) BUILD=0 ;;
    -h|--help) sed -n '2,26p' bench/repl.sh; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$ENTRIES" -le 100000 ] || { echo "--entries at most 100000 (gen-data's uid=userNNNNN names)" >&2; exit 2; }
FD_PORT=${FD_PORT:-13589}; SL_PORT=${SL_PORT:-13590}; CONSUMER_PORT0=${CONSUMER_PORT0:-13600}
OUT=${OUT_DIR:-bench/out/repl-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.tsv
trap 'stop_all' EXIT
trap 'exit 130' INT TERM

if [ $BUILD = 1 ]; then
  cargo build --release --bin ferrodir -p ferrodir-bench >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
fi
RELEASE_DIR=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release
FERRODIR=$RELEASE_DIR/ferrodir
LAG_TOOL=$RELEASE_DIR/ldap-repl-lag
[ -x "$FERRODIR" ] && [ -x "$LAG_TOOL" ] || { echo "need $FERRODIR and $LAG_TOOL (drop --no-build)" >&2; exit 1; }

# --- the providers ------------------------------------------------------------------------
log "generating $ENTRIES users"
python3 bench/gen-data.py "$ENTRIES" > "$OUT/data.ldif"
TOTAL=$(grep -c '^dn: ' "$OUT/data.ldif")

slapd_provider_config() {  # dir: bench's slapd config plus syncprov with a session log
  write_slapd_config "$1/slapd.conf" "$1/db" "$1/slapd.pid"
  sed -i 's/^moduleload back_mdb$/moduleload back_mdb\nmoduleload syncprov/' "$1/slapd.conf"
  cat >> "$1/slapd.conf" <<CONF
index entryUUID,entryCSN eq
overlay syncprov
syncprov-checkpoint 1000 1
syncprov-sessionlog $((ENTRIES + 10000))
CONF
}

log "loading the providers"
mkdir -p "$OUT/slapd/db"
slapd_provider_config "$OUT/slapd"
"$SLAPADD" -q -w -f "$OUT/slapd/slapd.conf" -l "$OUT/data.ldif" >&2
load_ferrodir "$OUT/ferrodir" "$OUT/data.ldif" $((ENTRIES + 1000)) "$SHARDS" > /dev/null
ALL_CPUS=0-$(($(nproc) - 1))
start_slapd "$OUT/slapd" "$SL_PORT" "$ALL_CPUS"
start_ferrodir "$OUT/ferrodir" "$FD_PORT" "$ALL_CPUS"
FD_PROVIDER_PID=$FERRODIR_PID; SL_PROVIDER_PID=$SLAPD_PID

# --- consumers ------------------------------------------------------------------------------
# consumer_config DIR PROVIDER_PORT: a slapd consumer of the whole suffix, as a replica is
# usually configured (same schema and indices as the providers, plus entryUUID/entryCSN).
consumer_config() {
  mkdir -p "$1/db"
  cat > "$1/slapd.conf" <<CONF
include $SCHEMA_DIR/core.schema
include $SCHEMA_DIR/cosine.schema
include $SCHEMA_DIR/inetorgperson.schema
include $SCHEMA_DIR/nis.schema
pidfile $1/slapd.pid
modulepath $SLAPD_MODULE_DIR
moduleload back_mdb
threads 16
database mdb
suffix "$SUFFIX"
rootdn "$ROOT_DN"
rootpw $ROOT_PW
directory $1/db
maxsize 4294967296
dbnosync
index objectClass eq
index uid eq
index mail eq
index cn eq,sub
index entryUUID,entryCSN eq
syncrepl rid=001 provider=ldap://127.0.0.1:$2 bindmethod=simple binddn="$ROOT_DN"
  credentials=$ROOT_PW searchbase="$SUFFIX" type=refreshAndPersist retry="1 +"
CONF
}

start_consumer() {  # dir port -> sets CONSUMER_PID
  ensure_port_free "$2" "a consumer"
  "$SLAPD" -f "$1/slapd.conf" -h "ldap://127.0.0.1:$2/" -d 0 > "$1/serve.log" 2>&1 &
  CONSUMER_PID=$!; track $CONSUMER_PID
}

context_csn() {  # port: the suffix's contextCSN values, sorted, on one line
  "$LDAPSEARCH" -x -LLL -o ldif-wrap=no -H "ldap://127.0.0.1:$1" -D "$ROOT_DN" -w "$ROOT_PW" \
    -s base -b "$SUFFIX" contextCSN 2>/dev/null | awk '/^contextCSN: /{print $2}' | sort | tr '\n' ' '
}

count_entries() {  # port
  "$LDAPSEARCH" -x -LLL -o ldif-wrap=no -H "ldap://127.0.0.1:$1" -D "$ROOT_DN" -w "$ROOT_PW" -z 0 \
    -s sub -b "$SUFFIX" "(objectClass=*)" 1.1 2>/dev/null | grep -c '^dn: ' || true
}

# wait_caught_up PROVIDER_PORT CONSUMER_PORT TIMEOUT_S: until both show the same contextCSN
# (and it is not empty); prints the seconds it took.
wait_caught_up() {
  local start now want have
  start=$(date +%s.%N)
  while :; do
    want=$(context_csn "$1"); have=$(context_csn "$2")
    [ -n "$want" ] && [ "$want" = "$have" ] && break
    now=$(date +%s.%N)
    if python3 -c "import sys; sys.exit(0 if $now - $start > $3 else 1)"; then
      log "consumer on $2 not caught up after $3 s (provider: '$want', consumer: '$have')"; return 1
    fi
    sleep 0.2
  done
  python3 -c "print(round($(date +%s.%N) - $start, 2))"
}

touch_provider() {  # port: one write, which moves the provider's contextCSN
  printf 'dn: uid=user00000,ou=people,%s\nchangetype: modify\nreplace: description\ndescription: caught up %s\n' \
    "$SUFFIX" "$(date +%s.%N)" | "${LDAPSEARCH%ldapsearch}ldapmodify" -x -H "ldap://127.0.0.1:$1" \
    -D "$ROOT_DN" -w "$ROOT_PW" > /dev/null
}

record() { printf '%s\n' "$*" >> "$RESULTS"; log "$*"; }

# --- one provider's run -----------------------------------------------------------------------
one_provider() {  # name port pid rep
  local name=$1 port=$2 pid=$3 rep=$4 dir c secs count lag i pids=() ports=()
  dir=$OUT/run-$name-$rep; rm -rf "$dir"; mkdir -p "$dir"
  # refresh
  consumer_config "$dir/c0" "$port"
  start_consumer "$dir/c0" $CONSUMER_PORT0; pids+=("$CONSUMER_PID"); ports+=($CONSUMER_PORT0)
  secs=$(wait_caught_up "$port" $CONSUMER_PORT0 1800)
  count=$(count_entries $CONSUMER_PORT0)
  record "refresh	$name	$rep	entries=$count/$TOTAL	seconds=$secs"
  [ "$count" = "$TOTAL" ] || log "WARNING: the consumer of $name holds $count entries, the provider $TOTAL"
  # lag, one consumer
  lag=$("$LAG_TOOL" --provider 127.0.0.1:$port --consumer 127.0.0.1:$CONSUMER_PORT0 --bind-dn "$ROOT_DN" \
    --password "$ROOT_PW" --entries "$ENTRIES" --rate "$LAG_RATE" --duration-s "$LAG_SECONDS")
  record "lag	$name	$rep	consumers=1	$lag"
  # read throughput under the same writes, 1 consumer then 4
  read_under_writes "$name" "$port" "$pid" "$rep" 1 "$dir"
  stop_pid "${pids[0]}"
  for i in 1 2 3; do
    cp -a "$dir/c0" "$dir/c$i"
    sed -i "s#$dir/c0#$dir/c$i#g" "$dir/c$i/slapd.conf"
  done
  for i in 0 1 2 3; do
    start_consumer "$dir/c$i" $((CONSUMER_PORT0 + i)); pids[$i]=$CONSUMER_PID; ports[$i]=$((CONSUMER_PORT0 + i))
  done
  # Their copied contextCSN already equals the provider's: a write first, so that "caught
  # up" means each has finished its refresh and applied that write.
  for i in 0 1 2 3; do wait_ldap "${ports[$i]}"; done
  touch_provider "$port"
  for i in 0 1 2 3; do wait_caught_up "$port" "${ports[$i]}" 600 > /dev/null; done
  read_under_writes "$name" "$port" "$pid" "$rep" 4 "$dir"
  for i in 3 2 1 0; do stop_pid "${pids[$i]}"; done
}

read_under_writes() {  # name port pid rep consumers dir
  local name=$1 port=$2 pid=$3 rep=$4 n=$5 dir=$6 lag_out=$6/lag-$5.json samples
  samples=$(( (READ_SECONDS + 9) / 10 ))
  "$LAG_TOOL" --provider 127.0.0.1:$port --consumer 127.0.0.1:$CONSUMER_PORT0 --bind-dn "$ROOT_DN" \
    --password "$ROOT_PW" --entries "$ENTRIES" --first $((ENTRIES / 2)) --rate "$LAG_RATE" \
    --duration-s $((samples * 10 + 5)) > "$lag_out" &
  local lag_pid=$!; track $lag_pid
  ldclt_measure "$dir/ldclt-$n.out" "" "$port" "$pid" "$samples" 8 \
    -e "esearch,randombase,randombaselow=0,randombasehigh=$((ENTRIES - 1))" -s base \
    -f "objectClass=*" -b "uid=userXXXXX,ou=people,$SUFFIX"
  wait $lag_pid || true
  record "read	$name	$rep	consumers=$n	$MEASURE	writes=$(cat "$lag_out")"
}

: > "$RESULTS"
record "# bench/repl.sh --entries $ENTRIES --reps $REPS --lag-rate $LAG_RATE --lag-seconds $LAG_SECONDS --read-seconds $READ_SECONDS --shards $SHARDS; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
for rep in $(seq "$REPS"); do
  if [ $((rep % 2)) = 1 ]; then order="slapd ferrodir"; else order="ferrodir slapd"; fi
  for name in $order; do
    case $name in
      slapd) one_provider slapd "$SL_PORT" "$SL_PROVIDER_PID" "$rep" ;;
      ferrodir) one_provider ferrodir "$FD_PORT" "$FD_PROVIDER_PID" "$rep" ;;
    esac
  done
done
record "# done; load $(cut -d' ' -f1-3 /proc/loadavg)"
log "results in $RESULTS"
