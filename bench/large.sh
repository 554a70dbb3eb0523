#!/usr/bin/env bash
# Large directories (issue #28, item 1): ferrodir against slapd back-mdb on the same
# gen-data.py entries, the same indices, default cache_bytes, in one run:
#   - import: `ferrodir import` and `slapadd -q` entries/s, data directory size after it;
#   - warm lookups: random base lookups spread uniformly over all N users, then drawn by
#     Zipf's law (--zipf, default 1.0: a few hot entries), both with ldap-latency (the same
#     client, seed and entry sequence for both servers), after one full read of each;
#   - RSS of each server after the read runs (VmRSS, RssAnon, RssFile);
#   - cold lookups: per server, stop it, `sync; echo 3 > /proc/sys/vm/drop_caches` (root;
#     this drops the page cache of the whole machine), start it, time until it answers,
#     then the first --cold-duration seconds of uniform lookups, with the bytes the server
#     read from storage (/proc/PID/io read_bytes), its major page faults and its CPU time.
#     A clean stop (SIGTERM) leaves ferrodir its start cache (server/src/data/startcache.rs);
#   - crash lookups (--crash-reps, default 1): the same after SIGKILL, so ferrodir starts
#     without its cache and checks and reads every shard first (slapd: back-mdb needs no
#     recovery);
#   - the first start after the import (no cache either: "first_start" in raw.jsonl).
# Servers are pinned to CPU 0 and the client to CPU 1 (as bench/run.sh); every repetition
# runs ferrodir and slapd one after the other, alternating which goes first, and the
# report gives medians and the median of same-repetition ratios.
#
#   bash bench/large.sh [--n 1000000] [--reps 3] [--duration 10] [--cold-reps 2]
#                       [--cold-duration 10] [--zipf 1.0] [--shards 2] [--connections 8]
#                       [--server-cpus 0] [--client-cpus 1] [--client-threads 1]
#                       [--crash-reps 1] [--out DIR] [--keep] [--reuse]
#   --reuse: the databases of an earlier run with --out DIR are served again (its import
#   rows are kept): for a rerun of the read phases without generating and loading again.
#   In bench/pack-scale.sh's pack, on a 16-core host (after `bash scale.sh --check-pack`,
#   which unpacks slapd and ldclt; large.sh runs it if that was not done), 10M entries
#   (about 48 GB of disk and, there, some 20 minutes of generating and loading):
#     bash scale-pack/large.sh --n 10000000 --shards 8 --server-cpus 0-7 \
#       --client-cpus 8-15 --client-threads 4 --connections 64
#
# The disk check of bench/run.sh runs first (10M entries: about 48 GB). Data and
# databases are deleted at the end unless --keep. Output: DIR/raw.jsonl, DIR/results.md.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

N=1000000 REPS=3 DURATION=10 COLD_REPS=2 COLD_DURATION=10 CRASH_REPS=1 ZIPF=1.0 SHARDS=2 CONNECTIONS=8 OUT="" KEEP=0 REUSE=0
SERVER_CPU=0 CLIENT_CPU=1 CLIENT_THREADS=1 ARGS="$*"
while [ $# -gt 0 ]; do
  case $1 in
    --n) N=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --cold-reps) COLD_REPS=$2; shift 2 ;;
    --cold-duration) COLD_DURATION=$2; shift 2 ;;
    --zipf) ZIPF=$2; shift 2 ;;
    --shards) SHARDS=$2; shift 2 ;;
    --connections) CONNECTIONS=$2; shift 2 ;;
    --server-cpus) SERVER_CPU=$2; shift 2 ;;
    --client-cpus) CLIENT_CPU=$2; shift 2 ;;
    --client-threads) CLIENT_THREADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --reuse) REUSE=1; KEEP=1; shift ;;
    --crash-reps) CRASH_REPS=$2; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
: "${FD_PORT:=14489}" "${SL_PORT:=14490}"
if [ -d "$HERE/debs" ]; then  # bench/pack-scale.sh's folder: its unpacked programs
  [ -d "$HERE/root/.wrap" ] || bash "$HERE/scale.sh" --check-pack >&2 \
    || { echo "large.sh: scale.sh --check-pack failed" >&2; exit 1; }
  W=$HERE/root/.wrap
  FERRODIR=$HERE/bin/ferrodir SLAPD=$W/slapd SLAPADD=$W/slapadd LDCLT=$W/ldclt LDAPSEARCH=$W/ldapsearch
  SCHEMA_DIR=$HERE/root/etc/ldap/schema SLAPD_MODULE_DIR=$HERE/root/usr/lib/ldap TOOLS_DIR=$HERE/bin
  LIBDIR=$HERE/lib GEN=$HERE/gen-data.py OUT=${OUT:-$HERE/large-out/$(date +%Y%m%d-%H%M%S)}
  cd "$HERE"
else
  cd "$HERE/.."; LIBDIR=bench/lib GEN=bench/gen-data.py
fi
source "$LIBDIR/common.sh"
: "${TOOLS_DIR:=$(dirname "$FERRODIR")}"
[ -n "$TOOLS_DIR" ] || TOOLS_DIR=$(dirname "$FERRODIR")
[ -x "$FERRODIR" ] || { log "no ferrodir at $FERRODIR (cargo build --release)"; exit 1; }
[ -x "$TOOLS_DIR/ldap-latency" ] || { log "no ldap-latency in $TOOLS_DIR (cargo build --release -p ferrodir-bench)"; exit 1; }
OUT=${OUT:-bench/out/large-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
RAW=$OUT/raw.jsonl
if [ $REUSE = 1 ]; then
  [ -d "$OUT/ferrodir/data" ] && [ -d "$OUT/slapd/db" ] && [ -f "$RAW" ] \
    || { log "--reuse: no earlier run's databases and raw.jsonl in $OUT"; exit 1; }
  mv "$RAW" "$RAW.before-reuse"
fi
: > "$RAW"
trap stop_all EXIT
trap 'exit 130' INT TERM
[ $REUSE = 1 ] || disk_check "$OUT" "$N" 1
# A start that reads every shard (after the import, after a crash) takes about 2 s per
# million entries warm and up to a minute per million cold on a slow disk.
: "${WAIT_LDAP_S:=$((30 + N / 15000))}"
SLAPD_MAXSIZE=$(slapd_maxsize_for "$N")
[ "$N" -le 100000 ] && TEMPLATE='uid=user{:05},ou=people,dc=example,dc=com' \
                    || TEMPLATE='uid=user{:07},ou=people,dc=example,dc=com'
record() { $UTIL json "$@" >> "$RAW"; }
record type=meta started="$(date -Is)" host="$(hostname)" cpus="$(nproc)" n="$N" reps="$REPS" \
  duration_s="$DURATION" zipf="$ZIPF" shards="$SHARDS" connections="$CONNECTIONS" \
  loadavg="$(cut -d' ' -f1-3 /proc/loadavg)" client_threads="$CLIENT_THREADS" server_cpus="$SERVER_CPU" client_cpus="$CLIENT_CPU" \
  command="bash bench/large.sh $ARGS"

if [ $REUSE = 1 ]; then
  log "reusing the databases in $OUT (import rows from the earlier run)"
  grep '"type": "import"' "$RAW.before-reuse" >> "$RAW"
else
  log "generating $N users"
  t0=$(date +%s.%N)
  python3 "$GEN" "$N" > "$OUT/data.ldif"
  log "  $(($(stat -c %s "$OUT/data.ldif") / 1000000)) MB in $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s"
  ENTRIES=$(grep -c '^dn: ' "$OUT/data.ldif")
  # The LDIF is in the page cache for both loads alike.
  read -r secs bytes < <(load_ferrodir "$OUT/ferrodir" "$OUT/data.ldif" "$N" "$SHARDS")
  record type=import server=ferrodir entries="$ENTRIES" seconds="$secs" bytes="$bytes" loadavg="$(cut -d' ' -f1 /proc/loadavg)"
  log "ferrodir import: $secs s, $((bytes / 1000000)) MB"
  read -r secs bytes < <(load_slapd "$OUT/slapd" "$OUT/data.ldif")
  record type=import server=slapd entries="$ENTRIES" seconds="$secs" bytes="$bytes" loadavg="$(cut -d' ' -f1 /proc/loadavg)"
  log "slapadd: $secs s, $((bytes / 1000000)) MB"
  [ $KEEP = 1 ] || rm -f "$OUT/data.ldif"
fi

pid_of() { [ "$1" = ferrodir ] && echo "$FERRODIR_PID" || echo "$SLAPD_PID"; }
port_of() { [ "$1" = ferrodir ] && echo "$FD_PORT" || echo "$SL_PORT"; }
start_server() {  # server
  if [ "$1" = ferrodir ]; then start_ferrodir "$OUT/ferrodir" "$FD_PORT" "$SERVER_CPU"
  else start_slapd "$OUT/slapd" "$SL_PORT" "$SERVER_CPU"; fi
}
io_of() {  # pid -> "read_bytes majflt cpu_ticks"
  local io stat
  io=$(awk '/^read_bytes:/ {print $2}' "/proc/$1/io")
  stat=$(cat "/proc/$1/stat"); stat=${stat##*) }
  set -- $stat
  echo "$io ${10} $((${12} + ${13}))"
}
# lookups SERVER KIND(uniform|zipf) REP DURATION -> one raw.jsonl line
lookups() {
  local server=$1 kind=$2 rep=$3 duration=$4 pid file extra=() before after
  pid=$(pid_of "$server"); file="$OUT/$kind-$server-r$rep.json"
  [ "$kind" = zipf ] && extra=(--zipf "$ZIPF")
  before=$(io_of "$pid")
  taskset -c $CLIENT_CPU timeout -k 5 $((duration + 60)) "$TOOLS_DIR/ldap-latency" \
    --url "ldap://127.0.0.1:$(port_of "$server")" --mode base --base-template "$TEMPLATE" \
    --range "0..$N" --connections "$CONNECTIONS" --duration-s "$duration" "${extra[@]}" \
    --threads "$CLIENT_THREADS" \
    > "$file" 2> "$file.stderr" &
  local lpid=$!; track $lpid; wait $lpid || log "  ldap-latency failed: $(tail -1 "$file.stderr")"
  after=$(io_of "$pid")
  local result; result=$($UTIL latency "$file")
  python3 - "$kind" "$server" "$rep" "$before" "$after" "$result" "$(getconf CLK_TCK)" "${COLD_START_S:-}" >> "$RAW" <<'PY'
import json, sys
kind, server, rep, before, after, result, tck, start_s = sys.argv[1:]
b, a = [list(map(int, x.split())) for x in (before, after)]
r = json.loads(result)
ops = r.get("ops") or 0
row = {"type": "lookups", "kind": kind, "server": server, "rep": int(rep), "result": r,
       "read_bytes": a[0] - b[0], "major_faults": a[1] - b[1], "cpu_s": (a[2] - b[2]) / int(tck)}
if ops:
    row["read_bytes_per_op"] = round(row["read_bytes"] / ops, 1)
    row["cpu_us_per_op"] = round(row["cpu_s"] * 1e6 / ops, 2)
if start_s:  # a cold run: also what the start itself read from storage
    row["start_s"] = float(start_s)
    row["start_read_bytes"] = b[0]
print(json.dumps(row))
PY
  log "  $kind $server rep $rep: $(tail -1 "$RAW" | python3 -c 'import json,sys; r=json.load(sys.stdin); g=r["result"].get; print(g("ops_per_s"), "ops/s p50", g("p50_us"), "p99", g("p99_us"), "us; read", r["read_bytes"]//1000000, "MB,", r["major_faults"], "major faults, cpu", round(r["cpu_s"],1), "s")')"
}
record_rss() {  # server when
  local pid; pid=$(pid_of "$1")
  record type=rss server="$1" when="$2" vmrss_kb="$(vmrss_kb "$pid")" rssanon_kb="$(rssanon_kb "$pid")" \
    rssfile_kb="$(awk '/^RssFile:/ {print $2}' "/proc/$pid/status")"
}
order() { [ $(($1 % 2)) = 1 ] && echo "ferrodir slapd" || echo "slapd ferrodir"; }

log "starting both servers on CPU $SERVER_CPU; one full read of each"
for server in ferrodir slapd; do
  t0=$(date +%s.%N); start_server "$server"
  record type=first_start server=$server after_import=$((1 - REUSE)) seconds="$(python3 -c "print(round($(date +%s.%N)-$t0,2))")"
done
for server in ferrodir slapd; do
  t0=$(date +%s.%N); warm_read "$(port_of "$server")"
  record type=warm_read server=$server seconds="$(python3 -c "print(round($(date +%s.%N)-$t0,2))")"
done
for kind in uniform zipf; do
  for rep in $(seq "$REPS"); do
    for server in $(order "$rep"); do lookups "$server" "$kind" "$rep" "$DURATION"; done
  done
done
for server in ferrodir slapd; do record_rss "$server" "after the warm read runs"; done
record type=du server=ferrodir bytes="$(allocated_bytes "$OUT/ferrodir/data")" when="after the read runs"
record type=du server=slapd bytes="$(allocated_bytes "$OUT/slapd/db")" when="after the read runs"

# Cold: one server at a time is restarted on an empty page cache; the other keeps running.
if [ $((COLD_REPS + CRASH_REPS)) -gt 0 ] && ! [ -w /proc/sys/vm/drop_caches ]; then
  log "cannot write /proc/sys/vm/drop_caches (not root?): no cold or crash runs"; COLD_REPS=0 CRASH_REPS=0
fi
for rep in $(seq "$COLD_REPS"); do
  for server in $(order "$rep"); do
    if [ "$server" = ferrodir ]; then stop_pid "$FERRODIR_PID"; else stop_pid "$SLAPD_PID"; fi
    sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(date +%s.%N); start_server "$server"
    COLD_START_S=$(python3 -c "print(round($(date +%s.%N)-$t0,2))")
    lookups "$server" cold "$rep" "$COLD_DURATION"
    COLD_START_S=""
    record_rss "$server" "after cold run $rep"
  done
done
# Crash: the same after SIGKILL; ferrodir has no start cache then and reads every shard.
for rep in $(seq "$CRASH_REPS"); do
  for server in $(order "$rep"); do
    kill -KILL "$(pid_of "$server")" 2>/dev/null || true
    wait "$(pid_of "$server")" 2>/dev/null || true
    sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(date +%s.%N); start_server "$server"
    COLD_START_S=$(python3 -c "print(round($(date +%s.%N)-$t0,2))")
    lookups "$server" crash "$rep" "$COLD_DURATION"
    COLD_START_S=""
  done
done

python3 - "$RAW" > "$OUT/results.md" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = rows[0]
med = lambda xs: statistics.median(xs) if xs else float("nan")
out = [f"N = {meta['n']} users, {meta['reps']} reps x {meta['duration_s']} s, {meta['connections']} connections, "
       f"zipf s = {meta['zipf']}, ferrodir {meta['shards']} shards; load average at start {meta['loadavg']}", ""]
imp = {r["server"]: r for r in rows if r["type"] == "import"}
f, s = imp["ferrodir"], imp["slapd"]
out += ["| import | seconds | entries/s | data dir MB |", "| --- | ---: | ---: | ---: |"]
for name, r in (("ferrodir import", f), ("slapadd -q", s)):
    out.append(f"| {name} | {r['seconds']} | {r['entries'] / r['seconds']:,.0f} | {r['bytes'] / 1e6:,.0f} |")
out.append(f"| ferrodir / slapd | | **{s['seconds'] / f['seconds']:.2f}x** | **{f['bytes'] / s['bytes']:.2f}x** |")
out += ["", "| lookups | ferrodir ops/s (median) | slapd ops/s (median) | ratio (median of reps) | ferrodir p50/p99 us | slapd p50/p99 us | ferrodir / slapd read MB per run | ferrodir / slapd CPU us per op | start s (ferrodir / slapd) |",
        "| --- | ---: | ---: | ---: | --- | --- | --- | --- | --- |"]
for kind in ("uniform", "zipf", "cold", "crash"):
    runs = [r for r in rows if r["type"] == "lookups" and r["kind"] == kind]
    if not runs:
        continue
    by = {(r["server"], r["rep"]): r for r in runs}
    reps = sorted({r["rep"] for r in runs})
    ops = lambda srv: [by[(srv, k)]["result"].get("ops_per_s", 0) for k in reps if (srv, k) in by]
    ratios = [by[("ferrodir", k)]["result"]["ops_per_s"] / by[("slapd", k)]["result"]["ops_per_s"]
              for k in reps if ("ferrodir", k) in by and ("slapd", k) in by and by[("slapd", k)]["result"].get("ops_per_s")]
    pick = lambda srv, key: med([by[(srv, k)]["result"].get(key, 0) for k in reps if (srv, k) in by])
    field = lambda srv, key: med([by[(srv, k)].get(key, 0) for k in reps if (srv, k) in by])
    start = (f"{field('ferrodir', 'start_s'):.2f} / {field('slapd', 'start_s'):.2f} (read at start: "
             f"{field('ferrodir', 'start_read_bytes') / 1e6:,.0f} / {field('slapd', 'start_read_bytes') / 1e6:,.0f} MB)" if kind in ("cold", "crash") else "")
    out.append(f"| {kind} | {med(ops('ferrodir')):,.0f} | {med(ops('slapd')):,.0f} | **{med(ratios):.2f}x** ({', '.join(f'{x:.2f}' for x in ratios)}) | "
               f"{pick('ferrodir', 'p50_us'):.0f} / {pick('ferrodir', 'p99_us'):.0f} | {pick('slapd', 'p50_us'):.0f} / {pick('slapd', 'p99_us'):.0f} | "
               f"{field('ferrodir', 'read_bytes') / 1e6:,.0f} / {field('slapd', 'read_bytes') / 1e6:,.0f} | "
               f"{field('ferrodir', 'cpu_us_per_op'):.1f} / {field('slapd', 'cpu_us_per_op'):.1f} | {start} |")
rss = [r for r in rows if r["type"] == "rss" and r["when"] == "after the warm read runs"]
by = {r["server"]: r for r in rss}
out += ["", "| RSS after the read runs | VmRSS MiB | RssAnon MiB | RssFile MiB |", "| --- | ---: | ---: | ---: |"]
for srv in ("ferrodir", "slapd"):
    r = by[srv]
    out.append(f"| {srv} | {r['vmrss_kb'] / 1024:,.0f} | {r['rssanon_kb'] / 1024:,.0f} | {r['rssfile_kb'] / 1024:,.0f} |")
out.append(f"| ferrodir / slapd | **{by['ferrodir']['vmrss_kb'] / by['slapd']['vmrss_kb']:.2f}x** | | |")
first = {r["server"]: r for r in rows if r["type"] == "first_start"}
if first:
    what = ("First start after the import (ferrodir has no start cache yet)" if first["ferrodir"].get("after_import", 1)
            else "First start of this run (--reuse: after the earlier run's stop)")
    out += ["", f"{what}: ferrodir {first['ferrodir']['seconds']} s, slapd {first['slapd']['seconds']} s."]
du = {r["server"]: r["bytes"] for r in rows if r["type"] == "du"}
out += ["", f"Data directories after the read runs: ferrodir {du['ferrodir'] / 1e6:,.0f} MB, slapd {du['slapd'] / 1e6:,.0f} MB ({du['ferrodir'] / du['slapd']:.2f}x)."]
print("\n".join(out))
PY
cat "$OUT/results.md"
stop_all
[ $KEEP = 1 ] || rm -rf "$OUT/ferrodir/data" "$OUT/slapd/db"
log "results in $OUT"
