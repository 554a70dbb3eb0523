#!/usr/bin/env bash
# Multi-provider mesh benchmark (issue #26, item 6): three ferrodir nodes (`multi_provider =
# true`, each a refreshAndPersist consumer of the other two) against three slapd 2.5 nodes
# (back-mdb, syncprov, `multiprovider on`, a syncrepl of each other node), on 127.0.0.1, on
# the same data with the same indices, one mesh after the other in the same run.
#
#   bash bench/mesh.sh                          # 20k entries, 1 repetition, --down-seconds 20
#   bash bench/mesh.sh --down-seconds 60        # the issue's full catch-up run
#   bash bench/mesh.sh --smoke                  # CI: tiny sizes, checks the script still works
#
# Scenarios, per mesh (ferrodir, then slapd; with --reps R the order alternates):
#   write    one ldclt per node (--threads each, random replaces of `description`, each node
#            its own third of the entries, so no two nodes write the same entry) for
#            --seconds (ldclt samples are 10 s: rounded up): the acknowledged modifies per
#            second of the three together; then "drain": seconds from the end of the load
#            until the three nodes show the same contextCSN, and a digest of every entry's
#            DN, description and entryCSN compared across the nodes. The report's "on all
#            3 /s" is the load's writes over (load + drain) seconds: what the mesh sustains
#            when replication has to keep up.
#   lag      three ldap-repl-lag at once, node 1 -> 2, 2 -> 3, 3 -> 1 (each writes its own
#            third at --lag-rate writes/s, one request at a time, for --lag-seconds, and
#            times every 5th write until the next node shows it): p50/p99/max per pair; the
#            headline is the worst pair.
#   catchup  node 3 stopped (SIGTERM); nodes 1 and 2 write --down-rate writes/s each for
#            --down-seconds (ldap-repl-lag, so that both meshes get the same number of
#            changes); once 1 and 2 agree, node 3 is started again: seconds from starting it
#            until its contextCSN equals the others' (polled every 0.1 s), then the digest
#            check on all three. ferrodir: also seconds until its /readyz answers 200.
# CPU per write: the three servers' user + system CPU from the write load's start to the
# end of its drain, over the writes acknowledged.
# Durability is each server's default: slapd fdatasyncs every commit (no dbnosync, on its
# replicated writes too), ferrodir `durability = "power-loss"`. Logging too (ferrodir's
# access log to its serve.log, slapd -d 0). Nothing is pinned. Each ferrodir log's ERROR and
# panic lines are counted at the end of its mesh (FD_LOG_LEVEL=info for more).
# Data: gen-data users imported into ferrodir node 1 (server_id 1), exported with their
# entryUUID and entryCSN, and that one LDIF imported into ferrodir nodes 2 and 3 and
# slapadd'ed (-w) into the three slapd nodes: the six start identical.
# Options: --entries N (20000), --seconds S (20), --threads T (ldclt threads per node, 8),
# --lag-rate W (50), --lag-seconds S (20), --down-seconds S (20; 60 is the issue's run),
# --down-rate W (50), --reps R (1), --shards K (ferrodir, 2), --kinds "ferrodir slapd",
# --scenarios "write lag catchup" (a subset runs only those, e.g. --scenarios lag --reps 5
# for the lag's tail alone), --out DIR, --no-build (use $FERRODIR and $LAG_TOOL, default
# target/release/...), --smoke.
# Every process started here is stopped by PID on exit; every wait has a deadline. The exit
# status is 1 when a mesh did not converge or a tool failed (the numbers are still written).
set -euo pipefail
cd "$(dirname "$0")/.."
FERRODIR_ENV=${FERRODIR:-}
source bench/lib/common.sh

ENTRIES=20000; SECONDS_W=20; THREADS=8; LAG_RATE=50; LAG_SECONDS=20; DOWN_SECONDS=20; DOWN_RATE=50
REPS=1; SHARDS=2; KINDS="ferrodir slapd"; SCENARIOS="write lag catchup"; BUILD=1; OUT_DIR=""; SMOKE=0
LDCLT_CAP=()
while [ $# -gt 0 ]; do
  case $1 in
    --entries) ENTRIES=$2; shift ;;
    --seconds) SECONDS_W=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --lag-rate) LAG_RATE=$2; shift ;;
    --lag-seconds) LAG_SECONDS=$2; shift ;;
    --down-seconds) DOWN_SECONDS=$2; shift ;;
    --down-rate) DOWN_RATE=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --shards) SHARDS=$2; shift ;;
    --kinds) KINDS=$2; shift ;;
    --scenarios) SCENARIOS=$2; shift ;;
    --out) OUT_DIR=$2; shift ;;
    --no-build) BUILD=0 ;;
    --smoke) SMOKE=1 ;;
    -h|--help) sed -n '2,43p' bench/mesh.sh; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ $SMOKE = 1 ]; then
  # Everything once, as small as it goes: ldclt's one 10-s sample is the longest part.
  # Each ldclt thread stops after 500 modifies (-T), so that slapd's drain stays short.
  ENTRIES=300; SECONDS_W=10; THREADS=1; LAG_RATE=20; LAG_SECONDS=2; DOWN_SECONDS=2; DOWN_RATE=20; REPS=1
  LDCLT_CAP=(-T 500)
fi
[ "$ENTRIES" -ge 30 ] && [ "$ENTRIES" -le 100000 ] || { echo "--entries 30..100000 (gen-data's uid=userNNNNN names)" >&2; exit 2; }
for k in $KINDS; do case $k in ferrodir|slapd) ;; *) echo "--kinds: ferrodir and/or slapd" >&2; exit 2 ;; esac; done
SAMPLES=$(( (SECONDS_W + 9) / 10 ))
# Deadlines (s): the mesh settling after start, draining after the write load, a node's catch-up.
SETTLE_MAX=${SETTLE_MAX:-300}; DRAIN_MAX=${DRAIN_MAX:-300}; CATCHUP_MAX=${CATCHUP_MAX:-600}
FD_PORT0=${FD_PORT0:-13700}; FD_METRICS0=${FD_METRICS0:-13710}; SL_PORT0=${SL_PORT0:-13720}
OUT=${OUT_DIR:-bench/out/mesh-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.jsonl
FAILURES=0
trap 'stop_all' EXIT
trap 'exit 130' INT TERM

if [ $BUILD = 1 ]; then
  { cargo build --release --bin ferrodir && cargo build --release -p ferrodir-bench --bin ldap-repl-lag; } \
    >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
  RELEASE_DIR=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release
  FERRODIR=$RELEASE_DIR/ferrodir; LAG_TOOL=$RELEASE_DIR/ldap-repl-lag
else
  RELEASE_DIR=${CARGO_TARGET_DIR:-target}/release
  FERRODIR=${FERRODIR_ENV:-$RELEASE_DIR/ferrodir}; LAG_TOOL=${LAG_TOOL:-$RELEASE_DIR/ldap-repl-lag}
fi
[ -x "$FERRODIR" ] && [ -x "$LAG_TOOL" ] || { echo "need $FERRODIR and $LAG_TOOL (drop --no-build, or set FERRODIR and LAG_TOOL)" >&2; exit 1; }
LDAPMODIFY=${LDAPSEARCH%ldapsearch}ldapmodify

record() { $UTIL json "$@" >> "$RESULTS"; log "$*"; }
fail() { FAILURES=$((FAILURES + 1)); log "FAILED: $*"; }
# Times in bash arithmetic (nanoseconds), not python: the polling loops below run every
# 0.1 s, and a python start costs a third of a second on a busy machine.
now_ns() { date +%s%N; }
elapsed_since() {  # start_ns -> seconds, two decimals
  local cs=$(( ($(now_ns) - $1) / 10000000 ))
  printf '%d.%02d\n' $((cs / 100)) $((cs % 100))
}
past() { [ $(( $(now_ns) - $1 )) -gt $(( $2 * 1000000000 )) ]; }  # start_ns limit_s

# --- the data: one LDIF with entryUUID and entryCSN, the same on all six nodes -------------
log "generating $ENTRIES users"
python3 bench/gen-data.py "$ENTRIES" > "$OUT/gen.ldif"
THIRD=$((ENTRIES / 3))
# Node i (1..3) writes entries [(i-1)*THIRD, i*THIRD) in every scenario.
first_of() { echo $(( ($1 - 1) * THIRD )); }
last_of() { echo $(( $1 * THIRD - 1 )); }

# --- ferrodir nodes --------------------------------------------------------------------------
fd_port() { echo $((FD_PORT0 + $1)); }
fd_metrics() { echo $((FD_METRICS0 + $1)); }
echo "$ROOT_PW" > "$OUT/replication.password"

fd_config() {  # node dir: server_id = node; a consumer (rid = peer) of each other node
  local me=$1 dir=$2 peer
  mkdir -p "$dir"
  cat > "$dir/ferrodir.toml" <<TOML
server_id = $me
multi_provider = true
suffixes = ["$SUFFIX"]
shards = $SHARDS
example_data = false
root_dn = "$ROOT_DN"
root_password = "$ROOT_PW"
engine = "redb"
# The default, written out: fdatasync before a write is acknowledged.
durability = "power-loss"
# The same indices as the slapd nodes (bench/lib/common.sh); description unindexed.
index = ["objectClass eq", "uid,mail eq", "cn eq,sub"]
metrics_listen = "127.0.0.1:$(fd_metrics "$me")"
[limits]
shutdown_grace_s = 1
[log]
level = "${FD_LOG_LEVEL:-warn}"
TOML
  for peer in 1 2 3; do
    [ "$peer" = "$me" ] && continue
    cat >> "$dir/ferrodir.toml" <<TOML
[[replication]]
rid = $peer
provider = "ldap://127.0.0.1:$(fd_port "$peer")"
bind_dn = "$ROOT_DN"
password_file = "$OUT/replication.password"
search_base = "$SUFFIX"
type = "refreshAndPersist"
retry = "1 +"
TOML
  done
}

prepare_data() {  # node 1 imports gen.ldif; its export (with uuids and CSNs) is the data
  local i
  fd_config 1 "$OUT/data-fd"
  "$FERRODIR" import --config "$OUT/data-fd/ferrodir.toml" --data-dir "$OUT/data-fd/data" "$OUT/gen.ldif" >&2
  "$FERRODIR" export --config "$OUT/data-fd/ferrodir.toml" --data-dir "$OUT/data-fd/data" > "$OUT/data.ldif"
  rm -rf "$OUT/data-fd"
  TOTAL=$(grep -c '^dn: ' "$OUT/data.ldif")
  log "data: $TOTAL entries ($(grep -c '^entryUUID: ' "$OUT/data.ldif") with entryUUID)"
}

fd_start_node() {  # node -> FD_PID[node]; the caller waits for it
  local i=$1 dir=$MESH_DIR/n$1
  ensure_port_free "$(fd_port "$i")" "ferrodir node $i"
  "$FERRODIR" serve --config "$dir/ferrodir.toml" --data-dir "$dir/data" \
    --listen "127.0.0.1:$(fd_port "$i")" >> "$dir/serve.log" 2>&1 &
  NODE_PID[$i]=$!; track "${NODE_PID[$i]}"
}

fd_load_and_start() {
  local i
  for i in 1 2 3; do
    fd_config "$i" "$MESH_DIR/n$i"
    "$FERRODIR" import --config "$MESH_DIR/n$i/ferrodir.toml" --data-dir "$MESH_DIR/n$i/data" "$OUT/data.ldif" >&2
  done
  for i in 1 2 3; do fd_start_node "$i"; done
  for i in 1 2 3; do wait_ldap "$(fd_port "$i")"; ensure_running "${NODE_PID[$i]}" "ferrodir node $i"; done
}

# http_get NODE PATH [FILE]: the HTTP status of ferrodir's metrics listener (000 when nothing
# answers); the body goes to FILE. Python's urllib, so that the script needs no curl.
http_get() {
  python3 - "http://127.0.0.1:$(fd_metrics "$1")$2" "${3:-/dev/null}" <<'PY'
import sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        status, body = r.status, r.read()
except urllib.error.HTTPError as e:
    status, body = e.code, e.read()
except OSError:
    status, body = 0, b""
open(sys.argv[2], "wb").write(body)
print(f"{status:03d}")
PY
}
# ready_status NODE: /readyz's HTTP status (000 when nothing answers), in bash alone, since
# it is polled.
ready_status() {
  local status=000 port
  port=$(fd_metrics "$1")
  if { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
    printf 'GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3 2>/dev/null || true
    IFS=' ' read -r -t 2 _ status _ <&3 2>/dev/null || status=000
    exec 3<&-
  fi
  echo "${status:-000}"
}

# --- slapd nodes -----------------------------------------------------------------------------
sl_port() { echo $((SL_PORT0 + $1)); }

sl_config() {  # node dir: serverID = node; syncprov, a syncrepl of each other node, multiprovider
  local me=$1 dir=$2 peer
  mkdir -p "$dir/db"
  write_slapd_config "$dir/slapd.conf" "$dir/db" "$dir/slapd.pid"
  sed -i "s/^moduleload back_mdb\$/moduleload back_mdb\nmoduleload syncprov\nserverID $me/" "$dir/slapd.conf"
  {
    echo "index entryUUID,entryCSN eq"
    for peer in 1 2 3; do
      [ "$peer" = "$me" ] && continue
      printf 'syncrepl rid=%03d provider=ldap://127.0.0.1:%s bindmethod=simple binddn="%s"\n' \
        "$peer" "$(sl_port "$peer")" "$ROOT_DN"
      printf '  credentials=%s searchbase="%s" type=refreshAndPersist retry="1 +"\n' "$ROOT_PW" "$SUFFIX"
    done
    echo "multiprovider on"
    echo "overlay syncprov"
    echo "syncprov-checkpoint 1000 1"
    echo "syncprov-sessionlog $((ENTRIES + 100000))"
  } >> "$dir/slapd.conf"
}

sl_start_node() {
  local i=$1 dir=$MESH_DIR/n$1
  ensure_port_free "$(sl_port "$i")" "slapd node $i"
  "$SLAPD" -f "$dir/slapd.conf" -h "ldap://127.0.0.1:$(sl_port "$i")/" -d 0 >> "$dir/serve.log" 2>&1 &
  NODE_PID[$i]=$!; track "${NODE_PID[$i]}"
}

sl_load_and_start() {
  local i
  for i in 1 2 3; do
    sl_config "$i" "$MESH_DIR/n$i"
    "$SLAPADD" -q -w -f "$MESH_DIR/n$i/slapd.conf" -l "$OUT/data.ldif" >&2
  done
  for i in 1 2 3; do sl_start_node "$i"; done
  for i in 1 2 3; do wait_ldap "$(sl_port "$i")"; ensure_running "${NODE_PID[$i]}" "slapd node $i"; done
}

# --- what both meshes are asked ----------------------------------------------------------------
port_of() { if [ "$KIND" = ferrodir ]; then fd_port "$1"; else sl_port "$1"; fi; }

context_csn() {  # node: the suffix's contextCSN values, sorted, on one line ("" if no answer)
  timeout 5 "$LDAPSEARCH" -x -LLL -o ldif-wrap=no -H "ldap://127.0.0.1:$(port_of "$1")" -D "$ROOT_DN" \
    -w "$ROOT_PW" -s base -b "$SUFFIX" contextCSN 2>/dev/null | awk '/^contextCSN: /{print $2}' | sort | tr '\n' ' ' || true
}

# wait_same_csn START LIMIT NODES...: until every node named shows the same, non-empty
# contextCSN; prints the seconds since START. Returns 1 (and says what each showed) at LIMIT.
wait_same_csn() {
  local start=$1 limit=$2 first csn n same; shift 2
  while :; do
    same=1; first=$(context_csn "$1")
    [ -n "$first" ] || same=0
    for n in "${@:2}"; do
      [ $same = 1 ] || break
      csn=$(context_csn "$n"); [ "$csn" = "$first" ] || same=0
    done
    [ $same = 1 ] && break
    if past "$start" "$limit"; then
      for n in "$@"; do log "  node $n contextCSN: '$(context_csn "$n")'"; done
      return 1
    fi
    sleep 0.1
  done
  elapsed_since "$start"
}

touch_node() {  # node: one modify on the node, so that its contextCSN moves
  printf 'dn: uid=user%05d,ou=people,%s\nchangetype: modify\nreplace: description\ndescription: touched on node %s %s\n' \
    "$(first_of "$1")" "$SUFFIX" "$1" "$(now_ns)" \
    | timeout 30 "$LDAPMODIFY" -x -H "ldap://127.0.0.1:$(port_of "$1")" -D "$ROOT_DN" -w "$ROOT_PW" > /dev/null
}

# digest NODE: sha256 of every entry's DN, description and entryCSN, as a sorted list (the
# same on two nodes only when they hold the same entries with the same last writes).
digest() {
  timeout 120 "$LDAPSEARCH" -x -LLL -o ldif-wrap=no -H "ldap://127.0.0.1:$(port_of "$1")" -D "$ROOT_DN" \
    -w "$ROOT_PW" -z 0 -b "$SUFFIX" "(objectClass=*)" description entryCSN 2>/dev/null | python3 -c '
import hashlib, sys
entries, cur = [], None
for line in sys.stdin.read().split("\n") + [""]:
    if not line:
        if cur: entries.append("\x1f".join(sorted(cur)))
        cur = None
    elif line.lower().startswith("dn:"):
        cur = ["dn:" + line[3:].strip().lower()]
    elif cur is not None and ":" in line:
        k, v = line.split(":", 1)
        cur.append(k.strip().lower() + ":" + v.strip())
entries.sort()
print(len(entries), hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16])'
}

# check_converged LABEL: the three nodes' digests agree; records and returns 1 if not.
check_converged() {
  local d1 d2 d3
  d1=$(digest 1); d2=$(digest 2); d3=$(digest 3)
  if [ "$d1" = "$d2" ] && [ "$d2" = "$d3" ] && [ "${d1%% *}" = "$TOTAL" ]; then
    echo yes
  else
    log "  $1: digests differ or entries missing (want $TOTAL): node 1 '$d1', node 2 '$d2', node 3 '$d3'"
    echo no
  fi
}

server_cpu() {  # "utime stime" summed over the three nodes' processes, in ticks
  local i u s tu=0 ts=0
  for i in 1 2 3; do read -r u s < <($UTIL cpu "${NODE_PID[$i]}"); tu=$((tu + u)); ts=$((ts + s)); done
  echo "$tu $ts"
}

# settle: every node writes once and all three must show it: each consumer has finished
# its first refresh and persists (the copied contextCSNs are equal from the start, so
# equality alone proves nothing). ferrodir: /readyz first.
settle() {
  local start i secs
  start=$(now_ns)
  if [ "$KIND" = ferrodir ]; then
    for i in 1 2 3; do
      while [ "$(ready_status "$i")" != 200 ]; do
        past "$start" "$SETTLE_MAX" && { fail "$KIND node $i not ready after $SETTLE_MAX s"; return 1; }
        sleep 0.2
      done
    done
  fi
  for i in 1 2 3; do touch_node "$i" || { fail "$KIND node $i refused a write"; return 1; }; done
  secs=$(wait_same_csn "$start" "$SETTLE_MAX" 1 2 3) || { fail "$KIND mesh did not settle in $SETTLE_MAX s"; return 1; }
  record type=settle kind="$KIND" rep="$REP" seconds="$secs" converged="$(check_converged settle)"
}

# --- the scenarios ------------------------------------------------------------------------------
write_load() {
  local i before after start secs pids=() total=0 errors=0 rate=0 m conv
  before=$(server_cpu)
  for i in 1 2 3; do
    ldclt_start "$RUN_DIR/ldclt-$i.out" "" "$(port_of "$i")" "$SAMPLES" "$THREADS" \
      -D "$ROOT_DN" -w "$ROOT_PW" -e "attreplace=description:XXXXXX,random" -b "ou=people,$SUFFIX" \
      -f "uid=userXXXXX" -r "$(first_of "$i")" -R "$(last_of "$i")" "${LDCLT_CAP[@]}"
    pids+=("$LDCLT_PID")
  done
  for i in 0 1 2; do wait "${pids[$i]}" || true; done
  start=$(now_ns)
  for i in 1 2 3; do
    m=$($UTIL ldclt "$RUN_DIR/ldclt-$i.out" 2>>"$RUN_DIR/ldclt-$i.errors")
    rate=$(python3 -c "print(round($rate + $(value_of ops_per_s "$m"), 1))")
    total=$((total + $(value_of ops_total "$m"))); errors=$((errors + $(value_of errors "$m")))
    log "  node $i: $m"
  done
  [ "$errors" = 0 ] || fail "$KIND write load: ldclt reported errors (see $RUN_DIR/ldclt-*.out)"
  secs=$(wait_same_csn "$start" "$DRAIN_MAX" 1 2 3) || { fail "$KIND: no common contextCSN $DRAIN_MAX s after the write load"; secs=timeout; }
  # The servers' CPU from the load's start to the end of the drain: every node's share of
  # each write, its client's and its peers' applies alike.
  after=$(server_cpu)
  conv=$(check_converged write); [ "$conv" = yes ] || fail "$KIND: nodes differ after the write load"
  # shellcheck disable=SC2046  # the python prints two k=v words for record
  record type=write kind="$KIND" rep="$REP" ops_per_s="$rate" ops_total="$total" errors="$errors" \
    threads_per_node="$THREADS" seconds=$((SAMPLES * 10)) drain_s="$secs" converged="$conv" \
    $(python3 - "$before" "$after" "$total" <<'PY'
import os, sys
tick = os.sysconf("SC_CLK_TCK")
(u0, s0), (u1, s1) = (map(int, a.split()) for a in sys.argv[1:3])
cpu = (u1 - u0 + s1 - s0) / tick
ops = max(int(sys.argv[3]), 1)
print(f"cpu_s={cpu:.2f} cpu_us_per_write={cpu / ops * 1e6:.0f}")
PY
)
}

lag_tool() {  # from to first count rate seconds -> runs in the background, LAG_PID
  "$LAG_TOOL" --provider "127.0.0.1:$(port_of "$1")" --consumer "127.0.0.1:$(port_of "$2")" \
    --bind-dn "$ROOT_DN" --password "$ROOT_PW" --first "$3" --entries "$4" --rate "$5" \
    --duration-s "$6" --catch-up-s 120 > "$RUN_DIR/lag-$1-$2-$7.json" 2> "$RUN_DIR/lag-$1-$2-$7.err" &
  LAG_PID=$!; track $LAG_PID
}

lag() {
  local pairs=("1 2" "2 3" "3 1") p pids=() i
  for p in "${pairs[@]}"; do
    set -- $p
    lag_tool "$1" "$2" "$(first_of "$1")" "$THIRD" "$LAG_RATE" "$LAG_SECONDS" lag; pids+=("$LAG_PID")
  done
  for i in 0 1 2; do wait "${pids[$i]}" || fail "$KIND lag tool ${pairs[$i]} failed: $(tail -3 "$RUN_DIR/lag-${pairs[$i]% *}-${pairs[$i]#* }-lag.err")"; done
  local summary
  summary=$(python3 - "$RUN_DIR" <<'PY'
import json, sys
out = []
worst = {"lag_p50_ms": 0.0, "lag_p99_ms": 0.0, "lag_max_ms": 0.0}
writes = missing = errors = 0
rate = 0.0
for a, b in ((1, 2), (2, 3), (3, 1)):
    try:
        r = json.loads(open(f"{sys.argv[1]}/lag-{a}-{b}-lag.json").read().strip().splitlines()[-1])
    except Exception:
        print("lag_ok=0"); sys.exit()
    for k in worst:
        worst[k] = max(worst[k], r[k])
    writes += r["writes"]; missing += r["missing"]; errors += r["write_errors"]; rate += r["writes_per_s"]
    out.append(f"p{a}{b}={r['lag_p50_ms']}/{r['lag_p99_ms']}/{r['lag_max_ms']}")
print(" ".join(out), " ".join(f"{k}={v}" for k, v in worst.items()),
      f"writes={writes} writes_per_s={rate:.1f} missing={missing} write_errors={errors} lag_ok=1")
PY
)
  case $summary in *lag_ok=1*) ;; *) fail "$KIND: a lag tool printed no result" ;; esac
  case $summary in *"missing=0 write_errors=0"*) ;; *) fail "$KIND lag: writes missing or refused: $summary" ;; esac
  record type=lag kind="$KIND" rep="$REP" rate_per_node="$LAG_RATE" seconds="$LAG_SECONDS" $summary
}

catchup() {
  local start secs ready=n/a pids=() conv w1 w2 i
  stop_pid "${NODE_PID[3]}"
  log "  node 3 stopped; nodes 1 and 2 write $DOWN_RATE/s each for $DOWN_SECONDS s"
  lag_tool 1 2 "$(first_of 1)" "$THIRD" "$DOWN_RATE" "$DOWN_SECONDS" down; pids+=("$LAG_PID")
  lag_tool 2 1 "$(first_of 2)" "$THIRD" "$DOWN_RATE" "$DOWN_SECONDS" down; pids+=("$LAG_PID")
  for i in 0 1; do wait "${pids[$i]}" || fail "$KIND: a writer failed while node 3 was down"; done
  w1=$(python3 -c "import json; print(json.load(open('$RUN_DIR/lag-1-2-down.json'))['writes'])" 2>/dev/null || echo 0)
  w2=$(python3 -c "import json; print(json.load(open('$RUN_DIR/lag-2-1-down.json'))['writes'])" 2>/dev/null || echo 0)
  wait_same_csn "$(now_ns)" "$DRAIN_MAX" 1 2 > /dev/null || fail "$KIND: nodes 1 and 2 disagree after writing"
  start=$(now_ns)
  if [ "$KIND" = ferrodir ]; then fd_start_node 3; else sl_start_node 3; fi
  secs=$(wait_same_csn "$start" "$CATCHUP_MAX" 1 3) || { fail "$KIND node 3 not caught up after $CATCHUP_MAX s"; secs=timeout; }
  if [ "$KIND" = ferrodir ]; then
    while [ "$(ready_status 3)" != 200 ] && ! past "$start" "$CATCHUP_MAX"; do sleep 0.1; done
    [ "$(ready_status 3)" = 200 ] && ready=$(elapsed_since "$start")
  fi
  conv=$(check_converged catchup); [ "$conv" = yes ] || fail "$KIND: nodes differ after the catch-up"
  record type=catchup kind="$KIND" rep="$REP" down_seconds="$DOWN_SECONDS" writes_while_down=$((w1 + w2)) \
    catchup_s="$secs" ready_s="$ready" converged="$conv"
}

value_of() {  # key "k=v k=v" -> v
  local pair; for pair in $2; do [ "${pair%%=*}" = "$1" ] && { echo "${pair#*=}"; return; }; done; echo 0
}

wanted() { case " $SCENARIOS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

one_mesh() {  # kind rep
  KIND=$1; REP=$2
  MESH_DIR=$OUT/$KIND-$REP; RUN_DIR=$MESH_DIR/run
  rm -rf "$MESH_DIR"; mkdir -p "$RUN_DIR"
  declare -g -a NODE_PID=()
  log "$KIND mesh, repetition $REP: loading and starting 3 nodes"
  if [ "$KIND" = ferrodir ]; then fd_load_and_start; else sl_load_and_start; fi
  if settle; then
    if wanted write; then
      log "$KIND: write load, 3 x $THREADS threads, $((SAMPLES * 10)) s"
      write_load
    fi
    if wanted lag; then
      log "$KIND: lag, 3 pairs at $LAG_RATE writes/s each, $LAG_SECONDS s"
      lag
    fi
    if wanted catchup; then
      log "$KIND: catch-up after $DOWN_SECONDS s down"
      catchup
    fi
  fi
  if [ "$KIND" = ferrodir ]; then
    for i in 1 2 3; do http_get "$i" /metrics "$MESH_DIR/n$i/metrics.txt" > /dev/null; done
    # The nodes write disjoint entries: any conflict counted here is worth a look.
    grep -h 'ferrodir_replication_conflicts_total' "$MESH_DIR"/n*/metrics.txt | grep -v -e '^#' -e ' 0$' \
      | sed 's/^/  conflicts counted: /' >&2 || true
  fi
  # All three told at once (each has a second of shutdown grace), then each waited for.
  for i in 1 2 3; do kill -TERM "${NODE_PID[$i]}" 2>/dev/null || true; done
  for i in 3 2 1; do stop_pid "${NODE_PID[$i]}"; done
  for i in 1 2 3; do
    # ferrodir's ERROR lines and panics (its WARNs of a peer gone away are expected here).
    if grep -qE 'ERROR|panicked' "$MESH_DIR/n$i/serve.log"; then
      log "  $KIND node $i log: $(grep -cE 'ERROR|panicked' "$MESH_DIR/n$i/serve.log") ERROR/panic lines (first: $(grep -E -m1 'ERROR|panicked' "$MESH_DIR/n$i/serve.log" | cut -c1-300))"
    fi
  done
  [ "${KEEP_DATA:-0}" = 1 ] || rm -rf "$MESH_DIR"/n*/data "$MESH_DIR"/n*/db
}

: > "$RESULTS"
record type=header command="bench/mesh.sh --entries $ENTRIES --seconds $SECONDS_W --threads $THREADS --lag-rate $LAG_RATE --lag-seconds $LAG_SECONDS --down-seconds $DOWN_SECONDS --down-rate $DOWN_RATE --reps $REPS --shards $SHARDS --kinds \"$KINDS\" --scenarios \"$SCENARIOS\"$([ $SMOKE = 1 ] && echo ' --smoke')" \
  cores="$(nproc)" load="$(cut -d' ' -f1-3 /proc/loadavg)" commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
prepare_data
for REP_I in $(seq "$REPS"); do
  set -- $KINDS
  if [ $((REP_I % 2)) = 0 ] && [ $# = 2 ]; then set -- "$2" "$1"; fi
  for kind in "$@"; do one_mesh "$kind" "$REP_I"; done
done
record type=done load="$(cut -d' ' -f1-3 /proc/loadavg)" failures="$FAILURES"
python3 bench/lib/mesh_report.py "$RESULTS" | tee "$OUT/report.md"
log "results in $RESULTS"
[ "$FAILURES" = 0 ] || { log "$FAILURES check(s) failed (see above)"; exit 1; }
