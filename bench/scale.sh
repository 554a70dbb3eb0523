#!/usr/bin/env bash
# Core scaling of random base lookups: ferrodir (shards = server cores) and slapd
# (back-mdb, 16 threads), each pinned to the first K cores, ldclt on the remaining ones.
# Made for a 16-core machine with no network and no package installs: run it from the
# folder bench/pack-scale.sh prepares, where it unpacks slapd, ldap-utils and 389-ds-base
# with `dpkg -x` into ./root and runs them from there (LD_LIBRARY_PATH, direct paths).
#
#   bash scale.sh [--cores 1,2,4,8] [--n 10000] [--reps 2] [--out DIR]
#   bash bench/scale.sh --system ...   # from the repository, with the system's packages
#
# Client: ldclt with 8 threads per server core, pinned to the cores the server does not
# use (when there are none, e.g. K = 2 on a 2-core machine, the client shares them and the
# row says so). Runs are interleaved (ferrodir, slapd, null responder), K by K. Bounded:
# about 25 s per server and K and repetition; 4 core counts x 2 reps finish in ~6 min.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CORES=1,2,4,8; N=10000; REPS=2; OUT=""; SYSTEM=0
while [ $# -gt 0 ]; do
  case $1 in
    --cores) CORES=$2; shift ;;
    --n) N=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --system) SYSTEM=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

if [ -d "$HERE/debs" ] && [ $SYSTEM = 0 ]; then  # the packed folder
  LIBDIR=$HERE/lib; GEN=$HERE/gen-data.py
  ROOT=$HERE/root
  if [ ! -x "$ROOT/usr/sbin/slapd" ]; then
    mkdir -p "$ROOT"
    for deb in "$HERE"/debs/*.deb; do dpkg -x "$deb" "$ROOT"; done
  fi
  ARCH_DIR=$(ls -d "$ROOT"/usr/lib/*-linux-gnu | head -1)
  export LD_LIBRARY_PATH="$ARCH_DIR:$ROOT/lib/$(basename "$ARCH_DIR"):$ARCH_DIR/dirsrv:$ROOT/usr/lib/ldap${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # SASL plugins and OpenLDAP client config would otherwise be looked up in /usr and /etc.
  export SASL_PATH="$ARCH_DIR/sasl2" LDAPNOINIT=1
  FERRODIR=$HERE/bin/ferrodir
  SLAPD=$ROOT/usr/sbin/slapd; SLAPADD=$ROOT/usr/sbin/slapadd
  LDCLT=$ROOT/usr/bin/ldclt; LDAPSEARCH=$ROOT/usr/bin/ldapsearch
  SCHEMA_DIR=$ROOT/etc/ldap/schema; SLAPD_MODULE_DIR=$ROOT/usr/lib/ldap
  TOOLS_DIR=""; [ -x "$HERE/bin/ldap-null-responder" ] && TOOLS_DIR=$HERE/bin
  OUT=${OUT:-$HERE/scale-out/$(date +%Y%m%d-%H%M%S)}
else  # from the repository, with the system's packages and target/release
  REPO=$(cd "$HERE/.." && pwd)
  LIBDIR=$HERE/lib; GEN=$HERE/gen-data.py
  FERRODIR=$REPO/target/release/ferrodir
  TOOLS_DIR=""; [ -x "$REPO/target/release/ldap-null-responder" ] && TOOLS_DIR=$REPO/target/release
  OUT=${OUT:-$REPO/bench/out/scale-$(date +%Y%m%d-%H%M%S)}
fi
source "$LIBDIR/common.sh"
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
RAW=$OUT/raw.jsonl; : > "$RAW"
trap 'stop_all' EXIT
trap 'exit 130' INT TERM
TOTAL_CPUS=$(nproc)
FD_PORT=${FD_PORT:-13589}; SL_PORT=${SL_PORT:-13590}; NULL_PORT=${NULL_PORT:-13591}

# Prove which binaries and libraries run: every shared object must resolve, and in the
# packed folder slapd must load libldap from ./root.
for bin in "$SLAPD" "$LDCLT" "$LDAPSEARCH" "$SLAPD_MODULE_DIR/back_mdb.so"; do
  if ldd "$bin" | grep -q 'not found'; then
    echo "missing libraries for $bin:" >&2; ldd "$bin" | grep 'not found' >&2; exit 1
  fi
done
{ echo "slapd: $SLAPD"; ldd "$SLAPD" | grep -E 'libldap|liblber|libsasl'; echo "ldclt: $LDCLT"; ldd "$LDCLT" | grep -E 'libldap|libnss3|libnspr'; } > "$OUT/libraries.txt"

log "N=$N: generating data"
python3 "$GEN" "$N" > "$OUT/data.ldif"
read -r secs bytes < <(load_slapd "$OUT/slapd" "$OUT/data.ldif")
base_args=(-e "esearch,randombase,randombaselow=0,randombasehigh=$((N - 1))" -s base -f "objectClass=*"
           -b "uid=user$([ "$N" -le 100000 ] && echo XXXXX || echo XXXXXXX),ou=people,$SUFFIX")

cpu_list() { local from=$1 to=$2; [ "$from" -le "$to" ] && echo "$from-$to" || echo ""; }

for k in ${CORES//,/ }; do
  server_cpus=$(cpu_list 0 $((k - 1)))
  client_cpus=$(cpu_list "$k" $((TOTAL_CPUS - 1)))
  shared=no; [ -z "$client_cpus" ] && { client_cpus=$(cpu_list 0 $((TOTAL_CPUS - 1))); shared=yes; }
  threads=$((8 * k))
  log "K=$k: server on CPUs $server_cpus, ldclt ($threads threads) on $client_cpus"
  load_ferrodir "$OUT/ferrodir-k$k" "$OUT/data.ldif" "$N" "$k" > /dev/null
  start_ferrodir "$OUT/ferrodir-k$k" $FD_PORT "$server_cpus"
  start_slapd "$OUT/slapd" $SL_PORT "$server_cpus"
  start_null "$OUT" $NULL_PORT "$server_cpus" "$k"
  warm_read $FD_PORT; warm_read $SL_PORT
  for rep in $(seq "$REPS"); do
    for server in ferrodir slapd null; do
      case $server in ferrodir) port=$FD_PORT pid=$FERRODIR_PID ;; slapd) port=$SL_PORT pid=$SLAPD_PID ;;
                      null) port=$NULL_PORT pid=$NULL_PID ;; esac
      [ -n "$pid" ] || continue
      ldclt_measure "$OUT/ldclt-k$k-$server-r$rep.out" "$client_cpus" $port "$pid" 1 $threads "${base_args[@]}"
      $UTIL json type=scale cores=$k server=$server rep=$rep threads=$threads shared=$shared \
        server_cpus="$server_cpus" client_cpus="$client_cpus" $MEASURE >> "$RAW"
      log "  K=$k $server rep $rep: $(echo "$MEASURE" | sed 's/ .*//')"
    done
  done
  stop_all
done

python3 - "$RAW" "$OUT/results.md" "$N" "$REPS" "$SLAPD" <<'PY'
import json, statistics, sys
from collections import defaultdict
raw, md, n, reps, slapd = sys.argv[1:6]
runs = defaultdict(list); info = {}
for line in open(raw):
    r = json.loads(line)
    runs[(r["cores"], r["server"])].append(r)
    info[r["cores"]] = r
def med(k, s):
    rs = runs.get((k, s), [])
    if not rs: return None, None
    if any(r["errors"] for r in rs): return "BROKEN", None
    ops = statistics.median(r["ops_per_s"] for r in rs)
    cpu = statistics.median((r["cpu_user_s"] + r["cpu_sys_s"]) / r["ops_total"] * 1e6 for r in rs if r["ops_total"])
    return ops, cpu
lines = [f"Random base lookups, N={int(n):,}, medians of {reps} interleaved runs of 10 s; slapd: {slapd}", "",
         "| server cores | client cores | ldclt threads | ferrodir ops/s | slapd ops/s | ferrodir/slapd "
         "| null ops/s | ferrodir CPU µs/op | slapd CPU µs/op |",
         "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
f = lambda v, d=0: "–" if v is None else (v if isinstance(v, str) else f"{v:,.{d}f}")
for k in sorted(info):
    (fo, fc), (so, sc), (no, _) = med(k, "ferrodir"), med(k, "slapd"), med(k, "null")
    ratio = f"{fo / so:.2f}" if isinstance(fo, float) and isinstance(so, float) and so else "–"
    client = info[k]["client_cpus"] + (" (shared with the server)" if info[k]["shared"] == "yes" else "")
    lines.append(f"| {k} | {client} | {info[k]['threads']} | {f(fo)} | {f(so)} | {ratio} | "
                 f"{f(no) if no is not None else 'n/a (tools not built)'} | {f(fc, 1)} | {f(sc, 1)} |")
open(md, "w").write("\n".join(lines) + "\n")
PY
cat "$OUT/results.md"
log "results in $OUT"
