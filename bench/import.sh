#!/usr/bin/env bash
# Bulk load: `ferrodir import` vs OpenLDAP `slapadd -q` (back-mdb) on the same LDIF file,
# with the same indices as bench/run.sh gives both (bench/lib/common.sh).
#
#   bash bench/import.sh                          # 100k entries, 2 interleaved repetitions
#   bash bench/import.sh --sizes 100000,1000000   # several sizes, one after the other
# Other options: --reps R (default 2), --shards K (ferrodir shards, default 2), --out DIR,
# --no-build (use $FERRODIR, default target/release/ferrodir, as it is).
# KEEP_DATA=1 keeps the LDIF and the databases.
#
# Wall time is from start to durable: slapadd -q does not sync its database, so its time
# includes an fsync of the database files afterwards (`sync FILE...`); ferrodir import
# commits every shard durably (fdatasync) before it exits, and the same fsync is run after
# it too (it finds nothing left to write). Runs are interleaved (slapadd, ferrodir, slapadd,
# ...) so that drift on a shared machine hits both alike; neither is pinned to a CPU.
# slapadd runs with tool-threads = the core count (bench/lib/common.sh), ferrodir with as
# many parse workers (at most 8) and one writer per shard.
# Prints one line per run and a table with both tools' times, entries/s and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib/common.sh

ORIG_ARGS="$*"
SIZES=100000; REPS=2; SHARDS=2; BUILD=1; OUT_DIR=""
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) SIZES=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --shards) SHARDS=$2; shift ;;
    --no-build) BUILD=0 ;;
    --out) OUT_DIR=$2; shift ;;
    -h|--help) sed -n '2,18p' bench/import.sh; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT_DIR:-bench/out/import-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.tsv
printf 'size\trep\ttool\tentries\tseconds\tentries_per_s\tmax_rss_kb\tbytes\tload\n' > "$RESULTS"
[ -x "$SLAPADD" ] || { log "slapadd is missing: apt-get install -y slapd (see .ci for the preseed)"; exit 1; }

if [ $BUILD = 1 ]; then
  for i in 1 2 3 4 5; do  # the server code may be changing under us: retry a failed build
    cargo build --release --bin ferrodir 2>"$OUT/build.log" && break
    [ $i = 5 ] && { tail -20 "$OUT/build.log" >&2; log "ferrodir does not build"; exit 1; }
    log "ferrodir build failed (attempt $i), retrying in 30 s"; sleep 30
  done
  FERRODIR=${CARGO_TARGET_DIR:-target}/release/ferrodir
fi

# timed TOOL SIZE REP DIR FILES_TO_SYNC -- COMMAND...: runs COMMAND, then fsyncs the files,
# and records the wall time of both and the command's peak RSS.
timed() {
  local tool=$1 size=$2 rep=$3 dir=$4 sync_glob=$5 start end secs rss
  shift 6
  start=$(date +%s.%N)
  /usr/bin/time -f '%M' -o "$dir/rss" "$@" > "$dir/$tool.log" 2>&1 || {
    tail -20 "$dir/$tool.log" >&2; log "$tool failed (log in $dir/$tool.log)"; exit 1; }
  # shellcheck disable=SC2086 # the glob is meant to expand
  sync $sync_glob
  end=$(date +%s.%N)
  secs=$(python3 -c "print(round($end - $start, 3))")
  rss=$(tail -1 "$dir/rss")
  local rate; rate=$(python3 -c "print(round($ENTRIES / $secs))")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$rep" "$tool" "$ENTRIES" "$secs" "$rate" "$rss" \
    "$(allocated_bytes "$dir")" "$(cut -d' ' -f1 /proc/loadavg)" >> "$RESULTS"
  log "  n=$size rep $rep $tool: ${secs}s, $rate entries/s, peak RSS $((rss / 1024)) MiB, load average $(cut -d' ' -f1 /proc/loadavg)"
}

for n in ${SIZES//,/ }; do
  d=$OUT/n$n
  mkdir -p "$d"
  log "N=$n: generating data"
  python3 bench/gen-data.py "$n" > "$d/data.ldif"
  ENTRIES=$(grep -c '^dn: ' "$d/data.ldif")
  for rep in $(seq "$REPS"); do
    rm -rf "$d/slapd" && mkdir -p "$d/slapd/db"
    write_slapd_config "$d/slapd/slapd.conf" "$d/slapd/db" "$d/slapd/slapd.pid"
    timed slapadd "$n" "$rep" "$d/slapd" "$d/slapd/db/*.mdb" -- \
      "$SLAPADD" -q -f "$d/slapd/slapd.conf" -l "$d/data.ldif"
    rm -rf "$d/ferrodir" && mkdir -p "$d/ferrodir"
    write_ferrodir_config "$d/ferrodir/ferrodir.toml" "$n" "$SHARDS"
    timed ferrodir "$n" "$rep" "$d/ferrodir" "$d/ferrodir/data/*" -- \
      "$FERRODIR" import --progress never --config "$d/ferrodir/ferrodir.toml" --data-dir "$d/ferrodir/data" \
      "$d/data.ldif"
  done
  [ "${KEEP_DATA:-0}" = 1 ] || rm -rf "$d/slapd/db" "$d/ferrodir/data" "$d/data.ldif"
done

python3 - "$RESULTS" "bash bench/import.sh $ORIG_ARGS" "$(nproc)" "$("$SLAPD" -VV 2>&1 | head -1)" <<'PY' | tee "$OUT/results.md"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print(f"command: {sys.argv[2]}  (cpus: {sys.argv[3]}; {sys.argv[4].strip()})\n")
print("| entries | rep | slapadd -q + fsync s | slapadd entries/s | ferrodir import s | ferrodir entries/s | slapadd s / ferrodir s | peak RSS MiB slapadd / ferrodir | MB on disk slapadd / ferrodir | load average after slapadd / ferrodir |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
by = {}
for r in rows:
    by.setdefault((int(r["size"]), int(r["rep"])), {})[r["tool"]] = r
for (size, rep), t in sorted(by.items()):
    s, f = t.get("slapadd"), t.get("ferrodir")
    if not s or not f:
        continue
    ratio = float(s["seconds"]) / float(f["seconds"])
    print(f"| {int(f['entries']):,} | {rep} | {float(s['seconds']):.2f} | {int(s['entries_per_s']):,} | "
          f"{float(f['seconds']):.2f} | {int(f['entries_per_s']):,} | {ratio:.2f} | "
          f"{int(s['max_rss_kb']) // 1024} / {int(f['max_rss_kb']) // 1024} | "
          f"{int(s['bytes']) // 1000000} / {int(f['bytes']) // 1000000} | {s['load']} / {f['load']} |")
PY
log "results in $OUT"
