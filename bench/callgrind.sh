#!/usr/bin/env bash
# Instructions per request of one operation, counted by callgrind: deterministic on a busy
# machine, where wall and CPU times are not. The release server runs under valgrind with N
# gen-data users (imported with `ferrodir import`, 2 shards); after a warm-up the counters
# are zeroed (`callgrind_control -z`), COUNT operations run one at a time, and the counters
# are dumped (`callgrind_control -d`). Everything the server does in between counts: the
# worker, the search pool, the commit and hash-pool threads, the socket calls.
#
#   BIN=$CARGO_TARGET_DIR/release bash bench/callgrind.sh --op base    # a base lookup
#   BIN=... bash bench/callgrind.sh --op bind --count 2000 --out DIR   # a simple bind
#   BIN=... bash bench/callgrind.sh --op sub10 --shards 16 --warmup 3000   # fan-out (#14)
# Ops: base (ldap-search-load, base scope on one user entry, one connection), bind (ldclt
# -e bindeach,bindonly: a connection, a bind as a user and an unbind each), uid-eq and
# sub10 (ldclt, one thread, the random filters of bench/run.sh's scenarios of those names:
# `(uid=userNNNNN)` and `(cn=user DDD*)` from the suffix, about 11 entries; --warmup
# operations first, 300 by default: 3000 sub10 searches bring most candidates into the
# entry cache, so that the count is not of first reads), modify (ldclt, one thread,
# `attreplace=description` on random users as bench/run.sh's modify scenario) and add
# (ldclt, one thread, `add,person` with fresh names as the add scenario): one client
# waiting for each answer, so every write is a commit of its own. BIN holds the
# release ferrodir and ldap-search-load (`cargo build --release -p ferrodir-server -p
# ferrodir-bench`). Prints "<op>: <n> instructions per op", and for the writes also the
# parts (inclusive) inside the engine's commit, redb's commit, the shard's staging of the
# write and `layout::entry_mutations`; OUT/annotate.txt holds the inclusive costs per
# function (`callgrind_annotate --inclusive=yes`). Stops what it starts.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib/common.sh
N=10000; OP=base; COUNT=2000; WARMUP=300; OUT=""; SHARDS=2
while [ $# -gt 0 ]; do
  case $1 in
    --n) N=$2; shift ;;
    --op) OP=$2; shift ;;
    --count) COUNT=$2; shift ;;
    --warmup) WARMUP=$2; shift ;;
    --out) OUT=$2; shift ;;
    --shards) SHARDS=$2; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
: "${BIN:?BIN: the folder with the release ferrodir and ldap-search-load}"
FERRODIR=$BIN/ferrodir
OUT=${OUT:-bench/out/callgrind-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
trap 'stop_all' EXIT
trap 'exit 130' INT TERM
PORT=${PORT:-13901}

data=$OUT/data-$N.ldif
[ -s "$data" ] || python3 bench/gen-data.py "$N" > "$data"
load_ferrodir "$OUT/fd" "$data" "$N" "$SHARDS" >/dev/null 2>"$OUT/import.log"
valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.out" "$FERRODIR" serve \
  --config "$OUT/fd/ferrodir.toml" --data-dir "$OUT/fd/data" --listen "127.0.0.1:$PORT" \
  >"$OUT/serve.log" 2>&1 &
SERVER=$!; track $SERVER
for _ in $(seq 600); do
  "$LDAPSEARCH" -x -H "ldap://127.0.0.1:$PORT" -b "" -s base 1.1 >/dev/null 2>&1 && break
  sleep 0.5
done

user=42
user_dn="uid=$(printf 'user%05d' $user),ou=people,$SUFFIX"
mask=$([ "$N" -le 100000 ] && echo XXXXX || echo XXXXXXX)
# sub10 as bench/run.sh: "cn=user DDD*" with one digit fewer than N-1 has.
last=$((N - 1)); digits=$((${#last} - 1))
sub_low=$((10 ** (digits - 1))); sub_high=$((10 ** digits - 1))
run_op() {  # count
  case $OP in
    base) "$BIN/ldap-search-load" --url "ldap://127.0.0.1:$PORT" --base "$user_dn" --scope base \
            --filter "(objectClass=*)" --expect-entries 1 --count-max "$1" --duration-s 86400 ;;
    bind) "$LDCLT" -h 127.0.0.1 -p "$PORT" -n 1 -T "$1" -e bindeach,bindonly \
            -D "$user_dn" -w "password$user" ;;
    uid-eq) "$LDCLT" -h 127.0.0.1 -p "$PORT" -n 1 -T "$1" -e esearch,random -s subtree -b "$SUFFIX" \
              -f "uid=user$mask" -r 0 -R $((N - 1)) ;;
    sub10) "$LDCLT" -h 127.0.0.1 -p "$PORT" -n 1 -T "$1" -e esearch,random -s subtree -b "$SUFFIX" \
             -f "cn=user $(printf 'X%.0s' $(seq "$digits"))*" -r "$sub_low" -R "$sub_high" ;;
    modify) "$LDCLT" -h 127.0.0.1 -p "$PORT" -n 1 -T "$1" -D "$ROOT_DN" -w "$ROOT_PW" \
              -e "attreplace=description:XXXXXX,random" -b "ou=people,$SUFFIX" -f "uid=userXXXXX" \
              -r 0 -R $((N - 1)) ;;
    add) ADDED=$((${ADDED:-0} + 1000000))  # fresh names for each run (the warm-up's, the count's)
         "$LDCLT" -h 127.0.0.1 -p "$PORT" -n 1 -T "$1" -D "$ROOT_DN" -w "$ROOT_PW" \
           -e add,person,incr,noloop -b "ou=people,$SUFFIX" -f "cn=cgXXXXXXX" -r "$ADDED" -R 9999999 ;;
    *) echo "unknown op $OP" >&2; exit 2 ;;
  esac
}
run_op "$WARMUP" >"$OUT/warmup.log" 2>&1
callgrind_control -z "$SERVER" >/dev/null
run_op "$COUNT" >"$OUT/run.log" 2>&1
callgrind_control -d "$SERVER" >/dev/null
sleep 1
# The dump just asked for (cg.out.1); the server's exit writes one more, for the shutdown.
dump=$(ls -t "$OUT"/cg.out.* | head -1)
stop_pid "$SERVER"
total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
callgrind_annotate --inclusive=yes --threshold=99.5 "$dump" >"$OUT/annotate.txt" 2>/dev/null || true
echo "$OP: $((total / COUNT)) instructions per op ($SHARDS shards, $COUNT ops, $dump)"
case $OP in
  modify|add)
    callgrind_annotate --auto=no --inclusive=yes "$dump" 2>/dev/null > "$OUT/inclusive.txt" || true
    for fn in 'redb_engine::RedbEngine as ferrodir_shard::storage::KvEngine>::commit [' \
              'redb::transactions::WriteTransaction::commit_with [' \
              'ShardActor as actix::handler::Handler<ferrodir_shard::actor::Write>>::handle [' \
              'ferrodir_shard::layout::entry_mutations ['; do
      n=$(awk -v fn="$fn" 'index($0, fn) {gsub(",", "", $1); print $1; exit}' "$OUT/inclusive.txt")
      echo "  inside ${fn% [}: $(( ${n:-0} / COUNT )) per op"
    done ;;
esac
echo "client: $(tail -c 300 "$OUT/run.log")"
