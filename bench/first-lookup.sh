#!/usr/bin/env bash
# A first side-by-side measurement: random base lookups over N users, ferrodir vs slapd
# (back-mdb), same data, same load generator (ldclt), server pinned to CPU 0, ldclt to
# CPU 1, 8 client threads. The full harness (issue 4) grows from this.
#   bash bench/first-lookup.sh            # N=10000, 3 samples of 10 s per server
# Needs: slapd, ldap-utils, 389-ds-base (ldclt), and a release build of ferrodir
# (`cargo build --release`). Everything runs on 127.0.0.1 and stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-10000}
SAMPLES=${SAMPLES:-3}
THREADS=${THREADS:-8}
OUT=${OUT:-bench/out/first-lookup}
FD_PORT=${FD_PORT:-13389}
SLAPD_PORT=${SLAPD_PORT:-13390}
FERRODIR=target/release/ferrodir

rm -rf "$OUT" && mkdir -p "$OUT/slapd-db"
python3 bench/gen-data.py "$N" > "$OUT/data.ldif"

cat > "$OUT/ferrodir.toml" <<TOML
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
shards = ${SHARDS:-2}
remote_reads = "${REMOTE_READS:-message}"
example_data = false
index = ["objectClass eq", "uid,mail,cn eq"]
[limits]
# The whole server's cache budget (entry caches and redb's page caches), the default.
cache_bytes = ${CACHE_BYTES:-1073741824}
[log]
level = "warn"
TOML
$FERRODIR import --config "$OUT/ferrodir.toml" --data-dir "$OUT/fd-data" "$OUT/data.ldif"

cat > "$OUT/slapd.conf" <<CONF
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
pidfile $PWD/$OUT/slapd.pid
modulepath /usr/lib/ldap
moduleload back_mdb
threads 16
database mdb
suffix "dc=example,dc=com"
rootdn "cn=admin,dc=example,dc=com"
rootpw secret
directory $PWD/$OUT/slapd-db
maxsize 4294967296
index objectClass eq
index uid eq
index mail eq
index cn eq,sub
CONF
slapadd -q -f "$OUT/slapd.conf" -l "$OUT/data.ldif"

lookup() {  # port -> "ops/s"
  taskset -c 1 ldclt -h 127.0.0.1 -p "$1" -n "$THREADS" -N "$SAMPLES" -q \
    -e esearch,randombase,randombaselow=0,randombasehigh=$((N - 1)) -s base -f "objectClass=*" \
    -b "uid=userXXXXX,ou=people,dc=example,dc=com" \
    2>&1 | sed -n 's/.*Global average rate: .*(\([0-9.]*\)\/sec).*/\1/p' | tail -1
}

taskset -c 0 $FERRODIR serve --config "$OUT/ferrodir.toml" --data-dir "$OUT/fd-data" \
  --listen 127.0.0.1:$FD_PORT > "$OUT/ferrodir.out" 2>&1 &
FD_PID=$!
taskset -c 0 slapd -f "$OUT/slapd.conf" -h "ldap://127.0.0.1:$SLAPD_PORT/" -d 0 > "$OUT/slapd.out" 2>&1 &
SLAPD_PID=$!
trap 'kill $FD_PID $SLAPD_PID 2>/dev/null || true' EXIT
sleep 2
# Warm both caches with one full read.
ldapsearch -x -H ldap://127.0.0.1:$FD_PORT -D cn=admin,dc=example,dc=com -w secret -b dc=example,dc=com dn > /dev/null
ldapsearch -x -H ldap://127.0.0.1:$SLAPD_PORT -D cn=admin,dc=example,dc=com -w secret -b dc=example,dc=com dn > /dev/null

fd=$(lookup $FD_PORT)
sl=$(lookup $SLAPD_PORT)
echo "random base lookups, N=$N, $THREADS ldclt threads, server on CPU 0:"
echo "  ferrodir: ${fd:-?} ops/s"
echo "  slapd:    ${sl:-?} ops/s"
python3 -c "import sys; a,b=float(sys.argv[1] or 0),float(sys.argv[2] or 1); print(f'  ratio ferrodir/slapd: {a/b:.2f}')" "${fd:-0}" "${sl:-1}"
