#!/usr/bin/env bash
# What one durable write costs the server, counted two ways that a busy machine does not
# blur: instructions per write (callgrind, as bench/callgrind.sh counts reads) and context
# switches per write (the kernel's per-thread counters, /proc/PID/task/*/status).
#
#   BIN=$CARGO_TARGET_DIR/release bash bench/callgrind-write.sh --op modify
#   BIN=... bash bench/callgrind-write.sh --op add --count 1000 --out DIR
#   BIN=... bash bench/callgrind-write.sh --op modify --switches-only
# Ops: modify (ldclt -e attreplace=description:XXXXXX,random on a random user, as
# bench/run.sh's modify scenario), add (ldclt -e add,person,incr: a new person under
# ou=people each time), both as the rootDN, one write at a time (-n 1: every commit carries
# one write, its fsync included). N gen-data users, 2 shards, `ferrodir import`.
#
# 1. Instructions: the release server under valgrind; after WARMUP writes the counters are
#    zeroed (`callgrind_control -z`), COUNT writes run, the counters are dumped. Prints
#    "<op>: <n> instructions per op" and, per op, the inclusive instructions of the parts
#    a write passes through (callgrind_annotate --inclusive=yes; a function's share
#    includes its callees, so the rows overlap).
# 2. Context switches (skipped with --instructions-only): the same server natively, pinned
#    to CPU 0 with ldclt on CPU 1 as in bench/run.sh, COUNT writes from 1 client and then
#    from 8; prints voluntary and involuntary switches per write for each thread group
#    (workers, commit threads, the rest). A voluntary switch is a thread going to sleep:
#    each wakeup of a worker, a commit thread or a shard actor's thread costs one.
# BIN holds the release ferrodir (`cargo build --release -p ferrodir-server`). Needs
# valgrind and ldclt. Stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib/common.sh
N=10000; OP=modify; COUNT=2000; WARMUP=300; OUT=""; DO_CG=1; DO_SWITCHES=1
while [ $# -gt 0 ]; do
  case $1 in
    --n) N=$2; shift ;;
    --op) OP=$2; shift ;;
    --count) COUNT=$2; shift ;;
    --warmup) WARMUP=$2; shift ;;
    --out) OUT=$2; shift ;;
    --instructions-only) DO_SWITCHES=0 ;;
    --switches-only) DO_CG=0 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
: "${BIN:?BIN: the folder with the release ferrodir}"
FERRODIR=$BIN/ferrodir
case $OP in modify|add) ;; *) echo "unknown op $OP (modify, add)" >&2; exit 2 ;; esac
OUT=${OUT:-bench/out/callgrind-write-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
trap 'stop_all' EXIT
trap 'exit 130' INT TERM
# Not callgrind.sh's port: another measurement on this machine must not reach this server.
PORT=${PORT:-14917}
data=$OUT/data-$N.ldif
[ -s "$data" ] || python3 bench/gen-data.py "$N" > "$data"

# Each run of adds names its entries apart (cn=<tag>-NNNNNNN), so no add meets an entry of
# an earlier run.
run_writes() {  # tag threads count-per-thread [cpu]
  local tag=$1 threads=$2 count=$3 cpu=${4:-}
  local pin=(); [ -z "$cpu" ] || pin=(taskset -c "$cpu")
  local mask; mask=$([ "$N" -le 100000 ] && echo XXXXX || echo XXXXXXX)
  case $OP in
    modify) "${pin[@]}" "$LDCLT" -h 127.0.0.1 -p "$PORT" -n "$threads" -T "$count" -D "$ROOT_DN" -w "$ROOT_PW" \
              -e "attreplace=description:XXXXXX,random" -b "ou=people,$SUFFIX" -f "uid=user$mask" \
              -r 0 -R $((N - 1)) ;;
    add) "${pin[@]}" "$LDCLT" -h 127.0.0.1 -p "$PORT" -n "$threads" -T "$count" -D "$ROOT_DN" -w "$ROOT_PW" \
           -e add,person,incr,noloop,commoncounter -b "ou=people,$SUFFIX" -f "cn=$tag-XXXXXXX" \
           -r 0 -R 9999999 ;;
  esac
}

wait_up() {
  for _ in $(seq 600); do
    "$LDAPSEARCH" -x -H "ldap://127.0.0.1:$PORT" -b "" -s base 1.1 >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "the server did not answer" >&2; return 1
}

if [ "$DO_CG" = 1 ]; then
  load_ferrodir "$OUT/fd" "$data" "$N" 2 >/dev/null 2>"$OUT/import.log"
  ensure_port_free "$PORT" "the server under callgrind"
  valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.out" "$FERRODIR" serve \
    --config "$OUT/fd/ferrodir.toml" --data-dir "$OUT/fd/data" --listen "127.0.0.1:$PORT" \
    >"$OUT/serve.log" 2>&1 &
  SERVER=$!; track $SERVER
  wait_up
  run_writes cgw 1 "$WARMUP" >"$OUT/warmup.log" 2>&1 || true
  callgrind_control -z "$SERVER" >/dev/null
  run_writes cgr 1 "$COUNT" >"$OUT/run.log" 2>&1 || true
  callgrind_control -d "$SERVER" >/dev/null
  sleep 1
  dump=$(ls -t "$OUT"/cg.out.* | head -1)
  stop_pid "$SERVER"
  callgrind_annotate --inclusive=yes --threshold=100 "$dump" >"$OUT/inclusive.txt" 2>/dev/null || true
  total=$(awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}' "$OUT/inclusive.txt")
  echo "$OP: $((total / COUNT)) instructions per op ($COUNT ops, $dump)"
  # The parts a write passes through, inclusive, per op (first match of each pattern).
  # User-space instructions only: what the kernel does for a system call (the socket, the
  # fsync, a wakeup) is not counted; the context switches below stand for it.
  for part in 'connection::read_loop' 'Session::dispatch' 'decode_message' 'op::modify::modify' \
      'op::add::add' 'access::locate' 'Stager::stage' 'batch::check_schema' 'modify::apply_changes' \
      'layout::entry_mutations' 'ShardCore::record' 'ShardActor::finish_commit' 'ShardActor::publish' \
      'ShardCore::cache_put' 'commit::spawn_committer' 'KvEngine>::commit' 'OpContext::respond' \
      'encode_message' 'connection::write_loop' 'mi_malloc' 'mi_free'; do
    awk -v pat="$part" -v n="$COUNT" 'index($0, pat) && !done {
        v = $1; gsub(",", "", v); sub(/^ */, "", v)
        printf "  %-28s %9d per op\n", pat, v / n; done = 1 }' "$OUT/inclusive.txt"
  done
  echo "client: $(tail -c 300 "$OUT/run.log" | tr '\n' ' ')"
fi

# Voluntary and involuntary context switches of every thread of PID, summed per group.
switches() {  # pid -> lines "group voluntary involuntary"
  local task name v nv
  for task in /proc/"$1"/task/*; do
    name=$(cat "$task/comm" 2>/dev/null) || continue
    v=$(awk '/^voluntary_ctxt_switches/ {print $2}' "$task/status" 2>/dev/null) || continue
    nv=$(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "$task/status" 2>/dev/null) || continue
    case $name in
      commit-*) name=commit ;;
      actix-rt*|ferrodir-worker*|worker*) name=worker ;;
      *) name=other ;;
    esac
    echo "$name $v $nv"
  done | awk '{v[$1] += $2; nv[$1] += $3} END {for (g in v) print g, v[g], nv[g]}' | sort
}

if [ "$DO_SWITCHES" = 1 ]; then
  load_ferrodir "$OUT/fd-native" "$data" "$N" 2 >/dev/null 2>"$OUT/import-native.log"
  ensure_port_free "$PORT" "the server"
  taskset -c 0 "$FERRODIR" serve --config "$OUT/fd-native/ferrodir.toml" --data-dir "$OUT/fd-native/data" \
    --listen "127.0.0.1:$PORT" >"$OUT/serve-native.log" 2>&1 &
  SERVER=$!; track $SERVER
  wait_up
  run_writes nw 1 "$WARMUP" 1 >"$OUT/warmup-native.log" 2>&1 || true
  for threads in 1 8; do
    per_thread=$(( (COUNT + threads - 1) / threads ))
    before=$(switches "$SERVER")
    run_writes "n$threads" "$threads" "$per_thread" 1 >"$OUT/switches-$threads.log" 2>&1 || true
    after=$(switches "$SERVER")
    ops=$((per_thread * threads))
    echo "$OP, $threads client thread(s), $ops writes: context switches per write (voluntary / involuntary)"
    join <(echo "$before") <(echo "$after") | awk -v n="$ops" '{
        v = $4 - $2; nv = $5 - $3; tv += v; tnv += nv
        printf "  %-8s %6.2f / %5.2f\n", $1, v / n, nv / n }
      END { printf "  %-8s %6.2f / %5.2f\n", "all", tv / n, tnv / n }'
  done
  stop_pid "$SERVER"
fi
