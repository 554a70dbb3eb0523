#!/usr/bin/env bash
# Disk footprint under add/delete churn (issue #14), ferrodir against slapd back-mdb in the
# same run: both load N gen-data users, then repeat CYCLES times "add CHURN fresh entries
# with ldclt (THREADS threads), then delete them all"; after every phase the allocated size
# of each data directory (du -B1, real blocks) is recorded. Ends with ferrodir stopped,
# `ferrodir compact` run on its data directory, and the size after that.
#
#   bash bench/churn.sh [--n 10000] [--churn 23000] [--cycles 3] [--shards 2]
#                       [--threads 8] [--out DIR] [--ferrodir PATH]
#
# Needs slapd, ldap-utils and ldclt (389-ds-base). Everything listens on 127.0.0.1 (ports
# FD_PORT, SL_PORT, default 39489 / 39490); every process started is stopped by PID on
# exit. Output: DIR/results.md (the table, also printed) and DIR/churn.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."

N=10000 CHURN=23000 CYCLES=3 SHARDS=2 THREADS=8 OUT="" FERRODIR_BIN=""
while [ $# -gt 0 ]; do
  case $1 in
    --n) N=$2; shift 2 ;;
    --churn) CHURN=$2; shift 2 ;;
    --cycles) CYCLES=$2; shift 2 ;;
    --shards) SHARDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --ferrodir) FERRODIR_BIN=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$FERRODIR_BIN" ] && FERRODIR=$FERRODIR_BIN
[ "$CHURN" = n ] && CHURN=$N
: "${FD_EXTRA_CONFIG=password_hash_on_write = false}"
export FD_EXTRA_CONFIG
: "${FD_PORT:=39489}" "${SL_PORT:=39490}"
# shellcheck source=lib/common.sh
source bench/lib/common.sh
trap stop_all EXIT INT TERM
[ -x "$FERRODIR" ] || { log "no ferrodir binary at $FERRODIR (cargo build --release, or --ferrodir)"; exit 1; }
OUT=${OUT:-bench/out/churn-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
# The loaded data plus at most CHURN live entries of ~600 bytes on each server.
disk_check "$OUT" $((N + CHURN)) 1
TSV=$OUT/churn.tsv
printf 'server\tphase\tbytes\tentries\tseconds\terrors\n' > "$TSV"

entries_of() {  # port: entries under the suffix, as the rootDN
  "$LDAPSEARCH" -x -LLL -H "ldap://127.0.0.1:$1" -D "$ROOT_DN" -w "$ROOT_PW" -b "$SUFFIX" \
    -s sub -z 0 "(objectClass=*)" 1.1 | grep -c '^dn:' || true
}

# One ldclt phase that stops once its CHURN names are used up (noloop); the time limit is
# only a guard. Prints "seconds errors".
churn_phase() {  # port what(add|delete) start
  local port=$1 what=$2 start=$3 end=$(($3 + CHURN - 1)) t0 t1 out="$OUT/ldclt-$1-$2-$3.out"
  local args=(-e "$what,person,incr,noloop,commoncounter")
  [ "$what" = delete ] && args=(-I 32 -e delete,incr,noloop,commoncounter)
  t0=$(date +%s.%N)
  timeout -k 5 900 "$LDCLT" -h 127.0.0.1 -p "$port" -n "$THREADS" -N 90 -q \
    -D "$ROOT_DN" -w "$ROOT_PW" "${args[@]}" -b "ou=people,$SUFFIX" -f "cn=churnXXXXXXX" \
    -r "$start" -R "$end" > "$out" 2>&1 || true
  t1=$(date +%s.%N)
  local ignored=""; [ "$what" = delete ] && ignored=32
  local errors; errors=$($UTIL ldclt "$out" "$ignored" 2>/dev/null | tr ' ' '\n' | sed -n 's/^errors=//p')
  echo "$(python3 -c "print(round($t1-$t0,1))") ${errors:-?}"
}

record_size() {  # server phase dir port seconds errors
  local bytes entries
  bytes=$(allocated_bytes "$3"); entries=$(entries_of "$4")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$bytes" "$entries" "$5" "$6" >> "$TSV"
  log "$1 $2: $((bytes / 1024 / 1024)) MiB, $entries entries (${5}s, errors $6)"
}

log "generating $N users"
python3 bench/gen-data.py "$N" > "$OUT/data.ldif"
load_ferrodir "$OUT/ferrodir" "$OUT/data.ldif" "$N" "$SHARDS" > /dev/null
load_slapd "$OUT/slapd" "$OUT/data.ldif" > /dev/null
start_ferrodir "$OUT/ferrodir" "$FD_PORT" 0-63
start_slapd "$OUT/slapd" "$SL_PORT" 0-63
record_size ferrodir loaded "$OUT/ferrodir/data" "$FD_PORT" 0 0
record_size slapd loaded "$OUT/slapd/db" "$SL_PORT" 0 0

for cycle in $(seq "$CYCLES"); do
  start=$(((cycle - 1) * CHURN))
  for server in ferrodir slapd; do
    port=$FD_PORT dir=$OUT/ferrodir/data
    [ $server = slapd ] && port=$SL_PORT dir=$OUT/slapd/db
    read -r secs errs < <(churn_phase "$port" add "$start")
    record_size $server "cycle $cycle: +$CHURN" "$dir" "$port" "$secs" "$errs"
    read -r secs errs < <(churn_phase "$port" delete "$start")
    record_size $server "cycle $cycle: -$CHURN" "$dir" "$port" "$secs" "$errs"
  done
done

# Offline compaction: the file only shrinks with the server stopped.
stop_pid "$FERRODIR_PID"
"$FERRODIR" export --config "$OUT/ferrodir/ferrodir.toml" --data-dir "$OUT/ferrodir/data" > "$OUT/before.ldif"
t0=$(date +%s.%N)
"$FERRODIR" compact --config "$OUT/ferrodir/ferrodir.toml" --data-dir "$OUT/ferrodir/data" >&2
t1=$(date +%s.%N)
"$FERRODIR" export --config "$OUT/ferrodir/ferrodir.toml" --data-dir "$OUT/ferrodir/data" > "$OUT/after.ldif"
cmp -s "$OUT/before.ldif" "$OUT/after.ldif" || { log "export differs after compact"; exit 1; }
printf '%s\t%s\t%s\t%s\t%s\t%s\n' ferrodir "compact (offline)" "$(allocated_bytes "$OUT/ferrodir/data")" \
  "$(grep -c '^dn: ' "$OUT/after.ldif")" "$(python3 -c "print(round($t1-$t0,1))")" 0 >> "$TSV"

python3 - "$TSV" > "$OUT/results.md" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
phases = []
for r in rows:
    if r["phase"] not in phases:
        phases.append(r["phase"])
by = {(r["server"], r["phase"]): r for r in rows}
print("| phase | ferrodir MiB | slapd MiB | ferrodir/slapd | entries (ferrodir / slapd) | seconds (ferrodir / slapd) |")
print("| --- | ---: | ---: | ---: | --- | --- |")
for p in phases:
    f, s = by.get(("ferrodir", p)), by.get(("slapd", p))
    fm = f"{int(f['bytes']) / 2**20:.1f}" if f else "–"
    sm = f"{int(s['bytes']) / 2**20:.1f}" if s else "–"
    if f and not s:  # after compaction: against slapd's last size
        s_last = [r for r in rows if r["server"] == "slapd"][-1]
        ratio = f"{int(f['bytes']) / int(s_last['bytes']):.2f} (vs slapd's last)"
    else:
        ratio = f"{int(f['bytes']) / int(s['bytes']):.2f}" if f and s else "–"
    ent = f"{f['entries'] if f else '–'} / {s['entries'] if s else '–'}"
    secs = f"{f['seconds'] if f else '–'} / {s['seconds'] if s else '–'}"
    print(f"| {p} | {fm} | {sm} | {ratio} | {ent} | {secs} |")
# Flatness (issue #28): the size after each cycle's deletes against the first cycle's.
after = [p for p in phases if p.startswith("cycle ") and ": -" in p]
if len(after) > 1:
    print()
    print("| after the deletes of | ferrodir / its cycle 1 | slapd / its cycle 1 | ferrodir / slapd |")
    print("| --- | ---: | ---: | ---: |")
    f1, s1 = int(by[("ferrodir", after[0])]["bytes"]), int(by[("slapd", after[0])]["bytes"])
    for p in after:
        f, s = int(by[("ferrodir", p)]["bytes"]), int(by[("slapd", p)]["bytes"])
        print(f"| {p.split(':')[0]} | {f / f1:.2f} | {s / s1:.2f} | {f / s:.2f} |")
PY
cat "$OUT/results.md"
