#!/usr/bin/env bash
# A storm of wrong binds against one client's lookups (issue #24, "Bad input"): 9,500 wrong
# binds over 1,000 DNs from one client (DNs 0-499 ten times, 500-999 nine times, under a
# policy with pwdMaxFailure 10), while another client looks one entry up in a closed loop.
# Reports the lookups' p99 before and during the storm, and checks that exactly the 500
# accounts with ten failures are locked. Everything on 127.0.0.1; the server is stopped by
# PID on exit.
#
#   cargo build --release --locked --bin ferrodir -p ferrodir-bench
#   bash bench/storm.sh [--out DIR]
#
# The server hashes with {SSHA512} (a failure costs one SHA-512 and one pwdFailureTime write;
# with the default {ARGON2} the storm would take minutes of hash threads, which is the
# point of argon2, not of this test). Target: the lookup p99 during the storm under 10 ms.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=""
while [ $# -gt 0 ]; do
    case $1 in
        --out) OUT=$2; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
FERRODIR=${FERRODIR:-target/release/ferrodir}
LOAD=${LOAD:-target/release/ldap-search-load}
for tool in "$FERRODIR" "$LOAD"; do
    [ -x "$tool" ] || { echo "storm: $tool is missing: cargo build --release --locked --bin ferrodir -p ferrodir-bench" >&2; exit 1; }
done
OUT=${OUT:-bench/out/storm-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
BASE="dc=example,dc=com"
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
server_pid=""
cleanup() { if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT

/usr/bin/python3 - "$OUT/data.ldif" <<'EOF'
import sys
base = "dc=example,dc=com"
out = [f"dn: {base}", "objectClass: dcObject", "objectClass: organization", "dc: example", "o: x", ""]
for ou in ("people", "policies"):
    out += [f"dn: ou={ou},{base}", "objectClass: organizationalUnit", f"ou: {ou}", ""]
out += [f"dn: cn=default,ou=policies,{base}", "objectClass: organizationalRole", "objectClass: pwdPolicy",
        "cn: default", "pwdAttribute: userPassword", "pwdLockout: TRUE", "pwdMaxFailure: 10", ""]
for i in range(1000):
    uid = f"user{i:05d}"
    out += [f"dn: uid={uid},ou=people,{base}", "objectClass: inetOrgPerson", f"uid: {uid}", f"cn: {uid}",
            f"sn: {uid}", f"userPassword: right-{i}", ""]
open(sys.argv[1], "w").write("\n".join(out) + "\n")
EOF
cat >"$OUT/ferrodir.toml" <<EOF
listen = "127.0.0.1:$PORT"
data_dir = "$OUT/data"
suffixes = ["$BASE"]
root_dn = "cn=admin,$BASE"
root_password = "storm-admin"
shards = 2
example_data = false
password_scheme = "{SSHA512}"
password_upgrade_on_bind = false
index = ["objectClass eq", "uid eq", "cn eq", "pwdAccountLockedTime pres"]
[ppolicy]
default_policy = "cn=default,ou=policies,$BASE"
[access_log]
enabled = false
[log]
level = "warn"
EOF
"$FERRODIR" import --config "$OUT/ferrodir.toml" --data-dir "$OUT/data" --progress never "$OUT/data.ldif" >"$OUT/import.log" 2>&1
"$FERRODIR" serve --config "$OUT/ferrodir.toml" >"$OUT/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
    ldapsearch -x -H "ldap://127.0.0.1:$PORT" -b "" -s base 1.1 >/dev/null 2>&1 && break
    sleep 0.1
done

lookup() {  # seconds -> the load tool's JSON line
    "$LOAD" --url "ldap://127.0.0.1:$PORT" --base "uid=user00042,ou=people,$BASE" --scope base \
        --attributes uid --duration-s "$1"
}
before=$(lookup 5)
/usr/bin/python3 - "$PORT" >"$OUT/storm.json" 2>"$OUT/storm.err" <<'EOF' &
import json, sys, time
import ldap3
port = sys.argv[1]
conn = ldap3.Connection(ldap3.Server(f"127.0.0.1:{port}"), user="cn=x", password="x",
                        authentication=ldap3.SIMPLE, raise_exceptions=False)
conn.open()
plan = [i for round_ in range(10) for i in range(1000) if round_ < 9 or i < 500]
started, refused, other = time.time(), 0, 0
for i in plan:
    conn.user, conn.password = f"uid=user{i:05d},ou=people,dc=example,dc=com", "wrong"
    conn.bind()
    if conn.result.get("result") == 49:
        refused += 1
    else:
        other += 1
print(json.dumps({"binds": len(plan), "refused": refused, "other": other, "seconds": round(time.time() - started, 2)}))
EOF
storm_pid=$!
during=$(lookup 5)
storm_running=no
kill -0 "$storm_pid" 2>/dev/null && storm_running=yes
wait "$storm_pid" || { echo "storm: the storm client failed: $(cat "$OUT/storm.err")" >&2; exit 1; }
locked=$(ldapsearch -x -LLL -H "ldap://127.0.0.1:$PORT" -D "cn=admin,$BASE" -w storm-admin \
    -b "ou=people,$BASE" -E pr=1000/noprompt "(pwdAccountLockedTime=*)" uid | awk '/^uid: /{print $2}' | sort)
n_locked=$(printf '%s\n' "$locked" | grep -c '^user' || true)
wrongly=$(printf '%s\n' "$locked" | awk -F'user' '/^user/{ if ($2+0 >= 500) print }' | wc -l)

p99() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["p99_us"])' "$1"; }
{
    echo "storm: $(cat "$OUT/storm.json")"
    echo "lookups before: $before"
    echo "lookups during (storm still running at the end: $storm_running): $during"
    echo "p99 before $(p99 "$before") us, during $(p99 "$during") us (target < 10000 us)"
    echo "locked accounts: $n_locked (want 500: user00000-user00499), locked among user00500-00999: $wrongly"
} | tee "$OUT/results.txt"
[ "$n_locked" -eq 500 ] && [ "$wrongly" -eq 0 ]
