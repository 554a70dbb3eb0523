#!/usr/bin/env bash
# Identity store benchmarks (issue #24): ferrodir against slapd 2.5 (back-mdb) with the
# ppolicy and unique overlays, same data, same load generator (ldclt), same run, on
# 127.0.0.1 only. See docs/BENCHMARKS.md, "Identity store (issue #24)".
#
#   bash bench/identity.sh                  # 10k users, every scenario, 3 repetitions
#   bash bench/identity.sh --size 2000 --reps 1 --scenarios bind,bind-fail
#
# Data: gen-data.py's users, every userPassword an {SSHA} value (bench/lib/identity_data.py:
# uid=user00042 has password00042), the same file for both servers, plus the pwdPolicy
# entry cn=default,ou=policies (pwdAttribute userPassword, pwdLockout TRUE, pwdMaxFailure
# 1000000: nobody locks).
# Servers (all on CPU 0, loaded before the first measurement, idle while not measured):
#   slapd         moduleload ppolicy + unique; overlay ppolicy with ppolicy_default naming
#                 the policy; overlay unique, unique_uri ldap:///ou=people,...?uid,mail?sub
#   ferrodir      [ppolicy] default_policy = the same DN; [[unique]] uid and mail under
#                 ou=people; password_upgrade_on_bind = false (the {SSHA} values stay
#                 {SSHA}); password_scheme the default ({ARGON2})
#   ferrodir-ssha the same with password_scheme = "{SSHA512}": a failed bind checks the
#                 dummy hash of the configured scheme (issue #24 item 6), so the scheme
#                 sets the price of a failure (bind-fail only)
#   ferrodir-plain the same as ferrodir without [[unique]] (add: the cost of uniqueness;
#                 modify: the rate with the audit log and the changelog off)
#   ferrodir-audit ferrodir-plain with [audit_log] path and [changelog] enabled = true
# A build that refuses [ppolicy] or [changelog] (the keys arrive in other branches) runs
# without them, and the results say so (ppolicy=off, changelog=off) instead of failing.
# Scenarios (ldclt, 8 threads on CPU 1, 10-s samples; per scenario, per repetition, the
# servers one after the other, so drift on a shared machine hits all alike):
#   bind       bindeach,bindonly: a new connection, a simple bind of a random user with the
#              right password, unbind (ferrodir, slapd)
#   bind-fail  the same with a wrong password, -I 49 and counteach: every failure counted
#              (ferrodir, ferrodir-ssha, slapd)
#   add        the rootDN adds inetOrgPersons with a fresh uid and mail each (ldclt
#              object file, one shared counter) (ferrodir, ferrodir-plain, slapd)
#   modify     bench/run.sh's modify: replace description of a random user as the rootDN
#              (ferrodir-plain, ferrodir-audit)
# bind runs before bind-fail: a success after failures clears pwdFailureTime (a write).
# Options: --size N (default 10000, at most 100000), --reps R (3), --samples S (10-s ldclt
# samples per run, 1), --shards K (ferrodir, 2), --scenarios a,b (bind,bind-fail,add,modify),
# --out DIR, --no-build. Every process started here is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib/common.sh

ORIG_ARGS="$*"
SIZE=10000; REPS=3; SAMPLES=1; SHARDS=2; SCENARIOS=bind,bind-fail,add,modify; OUT_DIR=""; BUILD=1
while [ $# -gt 0 ]; do
  case $1 in
    --size) SIZE=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --samples) SAMPLES=$2; shift ;;
    --shards) SHARDS=$2; shift ;;
    --scenarios) SCENARIOS=$2; shift ;;
    --out) OUT_DIR=$2; shift ;;
    --no-build) BUILD=0 ;;
    -h|--help) sed -n '2,43p' bench/identity.sh; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$SIZE" -le 100000 ] || { echo "--size at most 100000 (uid=userNNNNN names)" >&2; exit 2; }
CLIENT_THREADS=8
SERVER_CPU=0; CLIENT_CPU=1
SL_PORT=${SL_PORT:-13688}
declare -A PORT=([ferrodir]=${FD_PORT:-13689} [ferrodir-ssha]=$((${FD_PORT:-13689} + 1))
  [ferrodir-plain]=$((${FD_PORT:-13689} + 2)) [ferrodir-audit]=$((${FD_PORT:-13689} + 3)) [slapd]=$SL_PORT)
declare -A PID ADD_NEXT
OUT=${OUT_DIR:-bench/out/identity-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
RAW=$OUT/raw.jsonl; : > "$RAW"
trap 'stop_all' EXIT
trap 'exit 130' INT TERM
POLICY_DN="cn=default,ou=policies,$SUFFIX"
record() { $UTIL json "$@" >> "$RAW"; }
value_of() {  # key "k=v k=v" -> v
  local pair; for pair in $2; do [ "${pair%%=*}" = "$1" ] && { echo "${pair#*=}"; return; }; done; echo 0
}

if [ $BUILD = 1 ]; then
  cargo build --release --locked --bin ferrodir >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
fi
FERRODIR=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/ferrodir
[ -x "$FERRODIR" ] || { echo "no $FERRODIR (drop --no-build)" >&2; exit 1; }

# --- what this build accepts --------------------------------------------------------------
# fd_accepts CONFIG_TEXT LDIF_TEXT: a throwaway import with that config (after the bench's
# own) and that data; 0 when ferrodir takes both.
fd_accepts() {
  local d; d=$(mktemp -d "$OUT/probe.XXXXXX")
  FD_EXTRA_CONFIG="$1" write_ferrodir_config "$d/ferrodir.toml" 1 1
  printf 'dn: %s\nobjectClass: top\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n%s' \
    "$SUFFIX" "$2" > "$d/data.ldif"
  local rc=0
  "$FERRODIR" import --config "$d/ferrodir.toml" --data-dir "$d/data" "$d/data.ldif" > "$d/import.log" 2>&1 || rc=$?
  # The error's first lines, not the backtrace RUST_BACKTRACE may add after them.
  [ $rc = 0 ] || log "  probe refused: $({ grep -m1 'unknown field' "$d/import.log" || grep -m1 '^Error' "$d/import.log"; } | cut -c1-120)"
  rm -rf "$d"
  return $rc
}
PPOLICY_TOML="[ppolicy]
default_policy = \"$POLICY_DN\""
CHANGELOG_TOML="[changelog]
enabled = true"
POLICY_LDIF=$(printf '' | python3 bench/lib/identity_data.py --policy "$POLICY_DN")
if fd_accepts "$PPOLICY_TOML" "$POLICY_LDIF"; then FD_PPOLICY=on
else FD_PPOLICY=off; PPOLICY_TOML=""; log "this ferrodir refuses [ppolicy] default_policy or a pwdPolicy entry: it runs without a password policy"; fi
if fd_accepts "$CHANGELOG_TOML" ""; then FD_CHANGELOG=on
else FD_CHANGELOG=off; CHANGELOG_TOML=""; log "this ferrodir refuses [changelog] enabled: ferrodir-audit has the audit log only"; fi

# --- data ------------------------------------------------------------------------------------
log "generating $SIZE users with {SSHA} passwords"
python3 bench/gen-data.py "$SIZE" > "$OUT/gen.ldif"
python3 bench/lib/identity_data.py --policy "$POLICY_DN" < "$OUT/gen.ldif" > "$OUT/data.ldif"
FD_LDIF=$OUT/data.ldif
if [ $FD_PPOLICY = off ]; then
  FD_LDIF=$OUT/data-nopolicy.ldif
  python3 bench/lib/identity_data.py < "$OUT/gen.ldif" > "$FD_LDIF"
fi
rm -f "$OUT/gen.ldif"
# What ldclt adds: a fresh uid (the RDN) and mail from one counter shared by its threads.
printf 'objectclass: inetOrgPerson\ncn: bench [A]\nsn: [A]\nmail: add[A]@example.com\n' > "$OUT/add.template"

# --- servers ----------------------------------------------------------------------------------
UNIQUE_TOML="[[unique]]
attributes = [\"uid\", \"mail\"]
bases = [\"ou=people,$SUFFIX\"]"
load_fd() {  # name extra-config
  log "loading $1"
  FD_EXTRA_CONFIG="$2" load_ferrodir "$OUT/$1" "$FD_LDIF" "$SIZE" "$SHARDS" > /dev/null
}
COMMON_TOML="password_upgrade_on_bind = false"
load_fd ferrodir "$COMMON_TOML
$PPOLICY_TOML
$UNIQUE_TOML"
load_fd ferrodir-ssha "$COMMON_TOML
password_scheme = \"{SSHA512}\"
$PPOLICY_TOML
$UNIQUE_TOML"
load_fd ferrodir-plain "$COMMON_TOML
$PPOLICY_TOML"
load_fd ferrodir-audit "$COMMON_TOML
$PPOLICY_TOML
$CHANGELOG_TOML
[audit_log]
path = \"$OUT/ferrodir-audit/audit.ldif\""

log "loading slapd"
mkdir -p "$OUT/slapd/db"
write_slapd_config "$OUT/slapd/slapd.conf" "$OUT/slapd/db" "$OUT/slapd/slapd.pid"
sed -i 's/^moduleload back_mdb$/moduleload back_mdb\nmoduleload ppolicy\nmoduleload unique/' "$OUT/slapd/slapd.conf"
cat >> "$OUT/slapd/slapd.conf" <<CONF
# Issue #24: the password policy and attribute uniqueness ferrodir is compared with.
overlay ppolicy
ppolicy_default "$POLICY_DN"
overlay unique
unique_uri ldap:///ou=people,$SUFFIX?uid,mail?sub
CONF
"$SLAPADD" -q -f "$OUT/slapd/slapd.conf" -l "$OUT/data.ldif" >&2

for name in ferrodir ferrodir-ssha ferrodir-plain ferrodir-audit; do
  start_ferrodir "$OUT/$name" "${PORT[$name]}" $SERVER_CPU; PID[$name]=$FERRODIR_PID
  warm_read "${PORT[$name]}"
done
start_slapd "$OUT/slapd" "$SL_PORT" $SERVER_CPU; PID[slapd]=$SLAPD_PID
warm_read "$SL_PORT"

# Every user binds with its {SSHA} value on every server before anything is timed.
check_binds() {
  local name u=42 dn
  dn="uid=user$(printf '%05d' $u),ou=people,$SUFFIX"
  for name in ferrodir ferrodir-ssha slapd; do
    ldapwhoami -x -H "ldap://127.0.0.1:${PORT[$name]}" -D "$dn" -w "password$(printf '%05d' $u)" > /dev/null \
      || { log "$name refuses $dn's {SSHA} password: stopping"; exit 1; }
  done
}
check_binds

# --- scenarios -----------------------------------------------------------------------------------
MASK=XXXXX
scenario_servers() {
  case $1 in
    bind) echo "ferrodir slapd" ;;
    bind-fail) echo "ferrodir ferrodir-ssha slapd" ;;
    add) echo "ferrodir ferrodir-plain slapd" ;;
    modify) echo "ferrodir-plain ferrodir-audit" ;;
    *) log "unknown scenario $1"; exit 2 ;;
  esac
}

scenario_args() {  # scenario server -> SC_ARGS
  local users=(-D "uid=user$MASK,ou=people,$SUFFIX"
               -e "bindeach,bindonly,randombinddn,randombinddnlow=0,randombinddnhigh=$((SIZE - 1))")
  case $1 in
    bind) SC_ARGS=("${users[@]}" -w "password$MASK") ;;
    bind-fail) SC_ARGS=("${users[@]}" -w "wrongpw$MASK" -I 49 -e counteach) ;;
    add) SC_ARGS=(-D "$ROOT_DN" -w "$ROOT_PW" -b "ou=people,$SUFFIX" -e "add,commoncounter"
                  -e "object=$OUT/add.template" -e "rdn=uid:add[A=INCRNNOLOOP(${ADD_NEXT[$2]:-0};9999999;7)]") ;;
    modify) SC_ARGS=(-D "$ROOT_DN" -w "$ROOT_PW" -e "attreplace=description:XXXXXX,random"
                     -b "ou=people,$SUFFIX" -f "uid=user$MASK" -r 0 -R $((SIZE - 1))) ;;
  esac
}

run_one() {  # scenario server rep
  local sc=$1 server=$2 rep=$3 file="$OUT/ldclt/$1-$2-r$3.out"
  scenario_args "$sc" "$server"
  ldclt_measure "$file" $CLIENT_CPU "${PORT[$server]}" "${PID[$server]}" "$SAMPLES" $CLIENT_THREADS "${SC_ARGS[@]}"
  record type=run scenario="$sc" server="$server" rep="$rep" $MEASURE
  local total; total=$(value_of ops_total "$MEASURE")
  # A gap after the names used, for adds still in flight when the sample ended.
  [ "$sc" = add ] && ADD_NEXT[$server]=$((${ADD_NEXT[$server]:-0} + total + 2 * CLIENT_THREADS))
  log "  $sc $server rep $rep: $(value_of ops_per_s "$MEASURE") ops/s errors=$(value_of errors "$MEASURE") ignored=$(value_of ignored "$MEASURE")"
}

mkdir -p "$OUT/ldclt"
record type=meta started="$(date -u +%Y-%m-%dT%H:%M:%SZ)" host="$(hostname)" cpus="$(nproc)" \
  load="$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' /)" \
  ferrodir_commit="$(git rev-parse --short HEAD 2>/dev/null || echo ?)" \
  slapd_version="$("$SLAPD" -VV 2>&1 | head -1 | sed 's/.*slapd \([0-9.]*\).*/\1/')" \
  size="$SIZE" reps="$REPS" samples="$SAMPLES" shards="$SHARDS" threads=$CLIENT_THREADS \
  ferrodir_ppolicy=$FD_PPOLICY ferrodir_changelog=$FD_CHANGELOG \
  command="bash bench/identity.sh $ORIG_ARGS"
for sc in ${SCENARIOS//,/ }; do
  servers=$(scenario_servers "$sc")
  log "scenario $sc: $servers"
  for rep in $(seq "$REPS"); do
    for server in $servers; do run_one "$sc" "$server" "$rep"; done
  done
done

# --- evidence that the features were on -------------------------------------------------------
# pwdFailureTime on a user after the failed binds (the policy counted them), the audit
# log's records and the changelog's last number (they were written).
root_search() {  # port base attrs...
  local port=$1 base=$2; shift 2
  "$LDAPSEARCH" -x -LLL -o ldif-wrap=no -H "ldap://127.0.0.1:$port" -D "$ROOT_DN" -w "$ROOT_PW" \
    -s base -b "$base" "(objectClass=*)" "$@" 2>/dev/null || true
}
failures=""
for server in ferrodir ferrodir-ssha slapd; do
  count=0
  for u in 00001 00002 00003 00004 00005 00006 00007 00008 00009 00010; do
    n=$(root_search "${PORT[$server]}" "uid=user$u,ou=people,$SUFFIX" pwdFailureTime | grep -c '^pwdFailureTime:' || true)
    count=$((count + n))
  done
  failures+=" ${server}=$count"
done
audit_records=$(grep -c '^changetype: ' "$OUT/ferrodir-audit/audit.ldif" 2>/dev/null || echo 0)
last_change=$(root_search "${PORT[ferrodir-audit]}" "" lastChangeNumber | sed -n 's/^lastChangeNumber: //p')
record type=evidence pwd_failure_times_on_10_users="${failures# }" audit_records="$audit_records" \
  changelog_last_change_number="${last_change:-none}"
log "evidence: pwdFailureTime values on user00001-10:$failures; audit records $audit_records; lastChangeNumber ${last_change:-none}"

stop_all
python3 bench/lib/identity_report.py "$RAW" > "$OUT/results.md"
cat "$OUT/results.md"
log "results in $OUT"
