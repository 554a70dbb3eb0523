#!/usr/bin/env bash
# Login storm (issue #28): the load SSSD, Keycloak or PAM put on a directory when many
# people log in at once, ferrodir against slapd 2.5 (back-mdb, memberof overlay), same
# data, same client (bench/tools ldap-login-storm), same run, 127.0.0.1 only. See
# docs/BENCHMARKS.md, "Login storm (issue #28)".
#
#   bash bench/login-storm.sh                 # 10k users, three password sets, 3 rounds
#   bash bench/login-storm.sh --smoke         # 300 users, 1-s runs, cheap hashes: does it all work
#   bash bench/login-storm.sh --sets ssha --reps 5 --no-capacity
#
# A login (ldap-login-storm, --workers closed-loop workers, pooled long-lived connections,
# one pool bound as the service account cn=login-svc, one kept for binds): (1) subtree
# search of ou=people for (uid=userNNNNN), one entry expected; (2) simple bind as its DN
# with its password; (3) subtree search of ou=groups for (member=<DN>), attribute cn;
# (4) base search of the user for memberOf. A login fails when a step does, or when (3)
# and (4) count different groups (memberOf must be on). Users drawn uniformly.
#
# Data: gen-data.py's users and groups plus bench/lib/login_data.py's (every user in 2 or
# 3 groups: dept-NNNN of 100 users, role-N of N/10, and gen-data.py's group00000... for
# the first N/10 users), the same for both servers (slapd's copy carries the memberOf
# values its overlay would have written, since slapadd bypasses overlays). Three sets:
#   ssha    every userPassword {SSHA} (salted SHA-1, made by login_data.py)
#   pbkdf2  users 0..K-1 (K = --slow-users, default 500) {PBKDF2-SHA512} at ferrodir's
#           default rounds (210,000), the rest {SSHA}; logins draw from 0..K-1 only
#   argon2  the same with {ARGON2} (argon2id m=19456 KiB, t=2, p=1: OWASP's minimum and
#           ferrodir's default)
# The slow hashes are made by `ferrodir hash-password` with a config carrying the scheme
# and its costs, one process per user, and cached in bench/out/login-hashes (the salts
# are random; the cost of a check is what the values fix).
# Servers: slapd with `moduleload memberof argon2 pw-pbkdf2` (pw-pbkdf2 is in Debian's
# slapd-contrib: a set whose scheme slapd cannot verify is reported as such, not measured),
# overlay memberof, indices uid, member, memberOf eq (+ common.sh's), Debian's access rules
# (userPassword: self write, anonymous auth; the rest readable), `threads` 16; ferrodir
# with common.sh's config, memberof = true, its default access rules (the same as
# Debian's), password_upgrade_on_bind = false (the stored values stay as loaded), and
# password_scheme the set's. Both on --server-cpus (default CPU 0), the client on
# --client-cpus (default CPU 1). Per set: both servers started, checked (a few logins
# each, zero failures), warmed (a short unrecorded run), then --reps rounds, each round
# ferrodir and slapd one after the other (the order alternating), one --duration-s run
# each; the other server idles meanwhile. Ratio: the median over rounds of that round's
# ferrodir/slapd logins/s.
# Capacity (ferrodir only, same pinning): logins/s and server CPU per login for each
# argon2 parameter set in --capacity (m_kib:t:p, comma-separated; default OWASP's minimum
# 19456:2:1, 47104:1:1, 65536:3:4), each with its own users' hashes made with those
# parameters (password_argon2_m_kib/_t/_p in the hashing config and the server's).
# Options: --size N (10000, at most 100000), --slow-users K (500), --reps R (3),
# --duration-s S (10), --workers W (8), --shards S (ferrodir, 2), --sets a,b
# (ssha,pbkdf2,argon2), --capacity LIST | --no-capacity, --server-cpus C, --client-cpus C,
# --hash-nice N (ferrodir's password_hash_threads_nice, default left at 10: on a machine
# whose cores other nice-0 work shares, the hash pool gets a small share of them, and the
# slow sets measure that), --out DIR, --no-build, --smoke (--size 300 --slow-users 20
# --reps 1 --duration-s 1 --workers 4 --capacity 8192:1:1, and cheap slow sets: PBKDF2 at
# 1,000 rounds, argon2 at 8192:1:1; exits non-zero unless every run logged in without a
# failure). Output: raw.jsonl (one line per run, the tool's JSON inside) and results.md.
# Every process started here is stopped by PID on exit.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ORIG_ARGS="$*"
SIZE=10000; SLOW_USERS=500; REPS=3; DURATION=10; WORKERS=8; SHARDS=2; SETS=ssha,pbkdf2,argon2
CAPACITY=19456:2:1,47104:1:1,65536:3:4; SERVER_CPUS=0; CLIENT_CPUS=1; OUT_DIR=""; BUILD=1; SMOKE=0
HASH_NICE=""; PBKDF2_ROUNDS=210000; ARGON2_SET=19456:2:1
while [ $# -gt 0 ]; do
  case $1 in
    --size) SIZE=$2; shift ;;
    --slow-users) SLOW_USERS=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --duration-s) DURATION=$2; shift ;;
    --workers) WORKERS=$2; shift ;;
    --shards) SHARDS=$2; shift ;;
    --sets) SETS=$2; shift ;;
    --capacity) CAPACITY=$2; shift ;;
    --no-capacity) CAPACITY="" ;;
    --server-cpus) SERVER_CPUS=$2; shift ;;
    --client-cpus) CLIENT_CPUS=$2; shift ;;
    --hash-nice) HASH_NICE=$2; shift ;;
    --out) OUT_DIR=$2; shift ;;
    --no-build) BUILD=0 ;;
    --smoke) SMOKE=1; SIZE=300; SLOW_USERS=20; REPS=1; DURATION=1; WORKERS=4; CAPACITY=8192:1:1
             PBKDF2_ROUNDS=1000; ARGON2_SET=8192:1:1 ;;
    -h|--help) sed -n '2,55p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$SIZE" -le 100000 ] || { echo "--size at most 100000 (uid=userNNNNN names)" >&2; exit 2; }
[ "$SLOW_USERS" -le "$SIZE" ] || SLOW_USERS=$SIZE

# The repository (bench/login-storm.sh) or a folder made by bench/pack-scale.sh, where
# scale.sh --check-pack has unpacked slapd into ./root: the same layout either way.
if [ -d "$HERE/debs" ]; then
  ROOT=$HERE/root
  [ -e "$ROOT/.unpacked" ] || { echo "run 'bash $HERE/scale.sh --check-pack' first (it unpacks slapd)" >&2; exit 1; }
  ARCH_DIR=$(ls -d "$ROOT"/usr/lib/*-linux-gnu | head -1)
  FERRODIR=$HERE/bin/ferrodir; SLAPD=$ROOT/.wrap/slapd; SLAPADD=$ROOT/.wrap/slapadd
  LDAPSEARCH=$ROOT/.wrap/ldapsearch; SCHEMA_DIR=$ROOT/etc/ldap/schema; SLAPD_MODULE_DIR=$ROOT/usr/lib/ldap
  TOOLS_DIR=$HERE/bin; BUILD=0
  OUT=${OUT_DIR:-$HERE/login-out/$(date +%Y%m%d-%H%M%S)}
  HASH_CACHE=$HERE/login-out/hashes
else
  cd "$HERE/.."
  RELEASE=$(cd "${CARGO_TARGET_DIR:-target}" 2>/dev/null && pwd || echo "$PWD/target")/release
  FERRODIR=$RELEASE/ferrodir; TOOLS_DIR=$RELEASE
  OUT=${OUT_DIR:-bench/out/login-storm-$(date +%Y%m%d-%H%M%S)}
  HASH_CACHE=bench/out/login-hashes
fi
source "$HERE/lib/common.sh"
mkdir -p "$OUT" "$HASH_CACHE"; OUT=$(cd "$OUT" && pwd)
RAW=$OUT/raw.jsonl; : > "$RAW"
trap 'stop_all' EXIT
trap 'exit 130' INT TERM
FD_PORT=${FD_PORT:-13789}; SL_PORT=${SL_PORT:-13790}
SVC_DN="cn=login-svc,$SUFFIX"; SVC_PW="login-svc-secret"

if [ $BUILD = 1 ]; then
  log "building ferrodir and the bench tools"
  { cargo build --release --locked --bin ferrodir && cargo build --release --locked -p ferrodir-bench; } \
    > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
fi
STORM=$TOOLS_DIR/ldap-login-storm
for f in "$FERRODIR" "$STORM"; do [ -x "$f" ] || { echo "no $f (drop --no-build)" >&2; exit 1; }; done

# --- slapd's modules ------------------------------------------------------------------------
SLAPD_MODULES="moduleload memberof"
declare -A SLAPD_VERIFIES=([ssha]=yes [pbkdf2]=no [argon2]=no)
if [ -e "$SLAPD_MODULE_DIR/argon2.so" ] || [ -e "$SLAPD_MODULE_DIR/argon2.la" ]; then
  SLAPD_MODULES+=$'\nmoduleload argon2'; SLAPD_VERIFIES[argon2]=yes
else log "slapd has no argon2 module in $SLAPD_MODULE_DIR: the argon2 set runs on ferrodir only"; fi
if [ -e "$SLAPD_MODULE_DIR/pw-pbkdf2.so" ] || [ -e "$SLAPD_MODULE_DIR/pw-pbkdf2.la" ]; then
  SLAPD_MODULES+=$'\nmoduleload pw-pbkdf2'; SLAPD_VERIFIES[pbkdf2]=yes
else log "slapd has no pw-pbkdf2 module (Debian: slapd-contrib): the pbkdf2 set runs on ferrodir only"; fi

# --- data -----------------------------------------------------------------------------------
# hashes FILE COUNT CONFIG_TOML: line i the hash of password<i, 5 digits> made by ferrodir
# hash-password with that config (cached by the config's text and COUNT).
hashes() {
  local file=$1 count=$2 toml=$3 key cfg
  key=$(printf '%s\n%s\n' "$count" "$toml" | sha256sum | cut -c1-16)
  if [ ! -s "$HASH_CACHE/$key.txt" ]; then
    cfg=$OUT/hash-$key.toml
    printf 'suffixes = ["%s"]\n%s\n' "$SUFFIX" "$toml" > "$cfg"
    log "  hashing $count passwords with: $(echo "$toml" | tr '\n' ' ')"
    seq 0 $((count - 1)) | xargs -P "$(nproc)" -I{} sh -c \
      'h=$(printf "password%05d\n" {} | "$0" hash-password --config "$1") && echo "{} $h"' "$FERRODIR" "$cfg" \
      | sort -n | cut -d' ' -f2 > "$HASH_CACHE/$key.tmp"
    [ "$(grep -c '^{' "$HASH_CACHE/$key.tmp")" = "$count" ] || { log "hash-password failed"; exit 1; }
    mv "$HASH_CACHE/$key.tmp" "$HASH_CACHE/$key.txt"
  fi
  cp "$HASH_CACHE/$key.txt" "$file"
}

argon2_toml() {  # m:t:p
  local m t p; IFS=: read -r m t p <<< "$1"
  printf 'password_scheme = "{ARGON2}"\npassword_argon2_m_kib = %s\npassword_argon2_t = %s\npassword_argon2_p = %s' "$m" "$t" "$p"
}
scheme_toml() {  # set name -> the password_scheme lines for its ferrodir and its hashes
  case $1 in
    ssha) printf 'password_scheme = "{SSHA512}"' ;;  # {SSHA} is read, not written: only failures' dummy
    pbkdf2) printf 'password_scheme = "{PBKDF2-SHA512}"\npassword_pbkdf2_rounds = %s' "$PBKDF2_ROUNDS" ;;
    argon2) argon2_toml "$ARGON2_SET" ;;
    cap-*) argon2_toml "${1#cap-}" ;;
  esac
}

log "generating $SIZE users"
python3 "$HERE/gen-data.py" "$SIZE" > "$OUT/gen.ldif"

# prepare NAME: OUT/NAME/{fd.ldif,slapd.ldif}, the ferrodir data dir loaded; slapd's too
# unless the set is ferrodir-only. Sets USERS (the range logins draw from).
prepare() {
  local name=$1 with_slapd=$2 dir=$OUT/$1 hashes_arg=()
  mkdir -p "$dir"
  USERS=$SIZE
  if [ "$name" != ssha ]; then
    hashes "$dir/hashes.txt" "$SLOW_USERS" "$(scheme_toml "$name")"
    hashes_arg=(--hashes "$dir/hashes.txt"); USERS=$SLOW_USERS
  fi
  python3 "$HERE/lib/login_data.py" --service-dn "$SVC_DN" --service-password "$SVC_PW" "${hashes_arg[@]}" \
    < "$OUT/gen.ldif" > "$dir/fd.ldif"
  FD_EXTRA_CONFIG="password_upgrade_on_bind = false
memberof = true
${HASH_NICE:+password_hash_threads_nice = $HASH_NICE}
$(scheme_toml "$name")" load_ferrodir "$dir/ferrodir" "$dir/fd.ldif" "$SIZE" "$SHARDS" > /dev/null
  if [ "$with_slapd" = yes ]; then
    python3 "$HERE/lib/login_data.py" --service-dn "$SVC_DN" --service-password "$SVC_PW" "${hashes_arg[@]}" \
      --memberof < "$OUT/gen.ldif" > "$dir/slapd.ldif"
    mkdir -p "$dir/slapd/db"
    write_slapd_config "$dir/slapd/slapd.conf" "$dir/slapd/db" "$dir/slapd/slapd.pid"
    python3 - "$dir/slapd/slapd.conf" "$SLAPD_MODULES" <<'PY'
import sys
path, modules = sys.argv[1], sys.argv[2]
text = open(path).read().replace("moduleload back_mdb\n", "moduleload back_mdb\n" + modules + "\n", 1)
open(path, "w").write(text)
PY
    cat >> "$dir/slapd/slapd.conf" <<CONF
# Issue #28, login storm: memberOf kept by the overlay (slapadd bypasses it: the values are
# in the LDIF), the indices a login's searches use, and Debian's default access rules
# (ferrodir's access = "default" is the same set).
overlay memberof
index member eq
index memberOf eq
access to attrs=userPassword by self write by anonymous auth by * none
access to attrs=shadowLastChange by self write by * read
access to * by * read
CONF
    "$SLAPADD" -q -f "$dir/slapd/slapd.conf" -l "$dir/slapd.ldif" >&2
  fi
}

# --- measuring ------------------------------------------------------------------------------
storm() {  # port users duration [extra args] -> the tool's JSON on stdout
  local port=$1 users=$2 duration=$3; shift 3
  taskset -c "$CLIENT_CPUS" timeout -k 5 $((${duration%.*} + 60)) "$STORM" --url "ldap://127.0.0.1:$port" \
    --service-dn "$SVC_DN" --service-password "$SVC_PW" --range "0..$users" --workers "${STORM_WORKERS:-$WORKERS}" \
    --duration-s "$duration" --op-timeout-ms 60000 "$@"
}

FAILED_RUNS=0
measure() {  # set server port pid users rep
  local set=$1 server=$2 port=$3 pid=$4 users=$5 rep=$6 before after json cpu
  before=$($UTIL cpu "$pid")
  json=$(storm "$port" "$users" "$DURATION" --seed "$rep" 2> "$OUT/$set/$server-r$rep.err") || {
    log "  $set $server rep $rep: the client failed: $(tail -1 "$OUT/$set/$server-r$rep.err")"; FAILED_RUNS=$((FAILED_RUNS + 1)); return 0; }
  after=$($UTIL cpu "$pid")
  cpu=$(cpu_delta "$before" "$after")
  printf '{"type":"run","set":"%s","server":"%s","rep":%s,"users":%s,"%s,"%s,"result":%s}\n' \
    "$set" "$server" "$rep" "$users" "$(echo "${cpu% *}" | sed 's/=/":/')" "$(echo "${cpu#* }" | sed 's/=/":/')" "$json" >> "$RAW"
  python3 - "$json" "$set" "$server" "$rep" <<'PY' >&2
import json, sys
r = json.loads(sys.argv[1])
print(f"[bench] {sys.argv[2]} {sys.argv[3]} rep {sys.argv[4]}: {r['logins_per_s']:.1f} logins/s "
      f"p50 {r['p50_us']/1000:.2f} ms p99 {r['p99_us']/1000:.2f} ms failures {r['failures']} "
      f"{r['failures_by_code'] or ''} steps p50 {r['step_p50_us']} us")
PY
  if [ "$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(1 if r["failures"] or not r["logins"] else 0)' "$json")" = 1 ]; then
    FAILED_RUNS=$((FAILED_RUNS + 1))
  fi
}

# check NAME PORT USERS: a few logins, none failing; 0 when the server passes.
check() {
  local json
  json=$(STORM_WORKERS=1 storm "$2" "$3" 120 --count-max 4 2> "$OUT/$1-check.err") || { log "  $1: $(tail -1 "$OUT/$1-check.err")"; return 1; }
  echo "$json" > "$OUT/$1-check.json"
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r["logins"] == 4 and not r["failures"] else 1)' "$json" \
    || { log "  $1 failed its check logins: $json"; return 1; }
}

record_meta() {
  printf '{"type":"meta","started":"%s","host":"%s","cpus":%s,"cpu_model":"%s","load":"%s","ferrodir_commit":"%s","slapd_version":"%s","size":%s,"slow_users":%s,"reps":%s,"duration_s":%s,"workers":%s,"shards":%s,"server_cpus":"%s","client_cpus":"%s","pbkdf2_rounds":%s,"argon2_set":"%s","hash_nice":"%s","command":"%s"}\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(hostname)" "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //; s/"//g')" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git rev-parse --short HEAD 2>/dev/null || echo ?)" \
    "$("$SLAPD" -VV 2>&1 | head -1 | sed 's/.*slapd \([0-9.]*\).*/\1/')" "$SIZE" "$SLOW_USERS" "$REPS" "$DURATION" \
    "$WORKERS" "$SHARDS" "$SERVER_CPUS" "$CLIENT_CPUS" "$PBKDF2_ROUNDS" "$ARGON2_SET" "${HASH_NICE:-default}" \
    "bash $0 $ORIG_ARGS" >> "$RAW"
}
record_meta

for set in ${SETS//,/ }; do
  case $set in ssha|pbkdf2|argon2) ;; *) log "unknown set $set"; exit 2 ;; esac
  with_slapd=${SLAPD_VERIFIES[$set]}
  log "set $set: preparing (slapd: $with_slapd)"
  prepare "$set" "$with_slapd"
  start_ferrodir "$OUT/$set/ferrodir" "$FD_PORT" "$SERVER_CPUS"; fd_pid=$FERRODIR_PID
  warm_read "$FD_PORT"
  check "$set-ferrodir" "$FD_PORT" "$USERS" || { log "ferrodir fails the $set logins: stopping"; exit 1; }
  servers="ferrodir"
  if [ "$with_slapd" = yes ]; then
    start_slapd "$OUT/$set/slapd" "$SL_PORT" "$SERVER_CPUS"; sl_pid=$SLAPD_PID
    warm_read "$SL_PORT"
    if check "$set-slapd" "$SL_PORT" "$USERS"; then servers="ferrodir slapd"
    else
      log "slapd fails the $set logins (cannot verify the scheme?): ferrodir only"
      printf '{"type":"unsupported","set":"%s","server":"slapd","why":"check logins failed: %s"}\n' "$set" \
        "$(tail -c 300 "$OUT/$set-slapd-check.json" 2>/dev/null | tr -d '"\\')" >> "$RAW"
    fi
  else
    printf '{"type":"unsupported","set":"%s","server":"slapd","why":"no module for the scheme"}\n' "$set" >> "$RAW"
  fi
  # Warm: a short unrecorded run on each (caches, connection setup, the hash pool).
  for server in $servers; do
    port=$FD_PORT; [ "$server" = slapd ] && port=$SL_PORT
    storm "$port" "$USERS" "$(( DURATION < 3 ? 1 : 3 ))" --seed 99 > /dev/null 2>&1 || true
  done
  for rep in $(seq "$REPS"); do
    order=$servers; [ $((rep % 2)) = 0 ] && order=$(echo "$servers" | tr ' ' '\n' | tac | tr '\n' ' ')
    for server in $order; do
      if [ "$server" = ferrodir ]; then measure "$set" ferrodir "$FD_PORT" "$fd_pid" "$USERS" "$rep"
      else measure "$set" slapd "$SL_PORT" "$sl_pid" "$USERS" "$rep"; fi
    done
  done
  stop_all
done

# --- argon2 capacity, ferrodir only ---------------------------------------------------------
for params in ${CAPACITY//,/ }; do
  set=cap-$params
  log "capacity $params (argon2 m_kib:t:p): preparing"
  prepare "$set" no
  start_ferrodir "$OUT/$set/ferrodir" "$FD_PORT" "$SERVER_CPUS"; fd_pid=$FERRODIR_PID
  check "$set-ferrodir" "$FD_PORT" "$USERS" || { log "ferrodir fails the $set logins: stopping"; exit 1; }
  storm "$FD_PORT" "$USERS" 1 --seed 99 > /dev/null 2>&1 || true
  for rep in $(seq "$REPS"); do measure "$set" ferrodir "$FD_PORT" "$fd_pid" "$USERS" "$rep"; done
  stop_all
done

python3 "$HERE/lib/login_report.py" "$RAW" > "$OUT/results.md"
cat "$OUT/results.md"
log "results in $OUT"
if [ $SMOKE = 1 ] && [ $FAILED_RUNS -gt 0 ]; then
  log "smoke: $FAILED_RUNS run(s) with failures or no logins"; exit 1
fi
