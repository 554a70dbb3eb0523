#!/usr/bin/env bash
# Dynamic groups (issue #25, item 10): reading a groupOfURLs entry whose memberURL selects
# N entries (default 1,000), ferrodir against slapd 2.5 (back-mdb) with slapo-dynlist
# (`dynlist-attrset groupOfURLs memberURL member`), same data, same client, same run, on
# 127.0.0.1 only. See docs/BENCHMARKS.md, "Dynamic groups".
#
#   bash bench/dynlist.sh                    # 1,000 members, 3 rounds of 10 s per server
#   bash bench/dynlist.sh --members 200 --rounds 1 --seconds 5 --no-build
#
# Data: ou=people with N inetOrgPersons (uid=userNNNNN) plus N others under ou=others that
# the URL does not select, and cn=dyn,ou=groups whose memberURL is
# ldap:///ou=people,dc=example,dc=com??one?(objectClass=inetOrgPerson).
# Servers (server on CPU 0, client on CPU 1 when taskset exists): slapd with dyngroup.schema,
# `index objectClass eq`, overlay dynlist; ferrodir (release build, --shards K, default 2).
# Client: one connection, one base search of cn=dyn for `member` at a time (a raw BER
# client in python: it sends pre-encoded requests and only counts the replies' bytes, so
# that the client costs little next to the server); the first answer of each server must
# hold exactly N member values. Reported: searches per second per server per round, and
# the ratio ferrodir/slapd (median of rounds). The servers alternate every round, so drift
# on a shared machine hits both alike. Every process started here is stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/.."

MEMBERS=1000; ROUNDS=3; SECONDS_PER=10; SHARDS=2; BUILD=1
while [ $# -gt 0 ]; do
  case $1 in
    --members) MEMBERS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --seconds) SECONDS_PER=$2; shift ;;
    --shards) SHARDS=$2; shift ;;
    --no-build) BUILD=0 ;;
    -h|--help) sed -n '2,22p' bench/dynlist.sh; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
SUFFIX="dc=example,dc=com"
ROOT_DN="cn=admin,$SUFFIX"; ROOT_PW="secret"
SL_PORT=${SL_PORT:-13788}; FD_PORT=${FD_PORT:-13789}
FERRODIR=${FERRODIR:-target/release/ferrodir}
WORK=$(mktemp -d /tmp/ferrodir-dynlist-bench.XXXXXX)
PIDS=()
stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap stop_all EXIT
trap "exit 130" INT TERM
pin() { if command -v taskset >/dev/null; then taskset -c "$1" "${@:2}"; else "${@:2}"; fi; }
# A server started in the background: exec, so that $! is the server's own PID.
serve_on() { if command -v taskset >/dev/null; then exec taskset -c "$1" "${@:2}"; else exec "${@:2}"; fi; }

if [ $BUILD = 1 ]; then
  cargo build --release --bin ferrodir >"$WORK/build.log" 2>&1 || { tail -20 "$WORK/build.log"; exit 1; }
fi

for port in "$SL_PORT" "$FD_PORT"; do
  if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$port" 2>/dev/null; then
    echo "port $port is in use: set SL_PORT/FD_PORT" >&2; exit 1
  fi
done

# --- data ------------------------------------------------------------------------------
python3 - "$MEMBERS" > "$WORK/data.ldif" <<'EOF'
import sys
n = int(sys.argv[1])
s = "dc=example,dc=com"
print(f"dn: {s}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n")
for ou in ("people", "others", "groups"):
    print(f"dn: ou={ou},{s}\nobjectClass: organizationalUnit\nou: {ou}\n")
for ou, cls in (("people", "inetOrgPerson"), ("others", "inetOrgPerson")):
    for i in range(n):
        uid = f"{ou[0]}{i:05d}" if ou == "others" else f"user{i:05d}"
        print(f"dn: uid={uid},ou={ou},{s}\nobjectClass: {cls}\nuid: {uid}\ncn: User {i}\nsn: {i}\n")
print(f"dn: cn=dyn,ou=groups,{s}\nobjectClass: groupOfURLs\ncn: dyn\n"
      f"memberURL: ldap:///ou=people,{s}??one?(objectClass=inetOrgPerson)\n")
EOF

# --- slapd -----------------------------------------------------------------------------
mkdir -p "$WORK/slapd/db"
{
  for schema in core cosine inetorgperson nis dyngroup; do echo "include /etc/ldap/schema/$schema.schema"; done
  echo "pidfile $WORK/slapd/slapd.pid"
  echo "modulepath /usr/lib/ldap"
  [ -e /usr/lib/ldap/back_mdb.la ] && echo "moduleload back_mdb"
  echo "moduleload dynlist"
  echo "database mdb"
  echo "maxsize 1073741824"
  echo "suffix \"$SUFFIX\""
  echo "rootdn \"$ROOT_DN\""
  echo "rootpw $ROOT_PW"
  echo "directory $WORK/slapd/db"
  echo "index objectClass eq"
  echo "access to * by * read"
  echo "overlay dynlist"
  echo "dynlist-attrset groupOfURLs memberURL member"
} > "$WORK/slapd/slapd.conf"
/usr/sbin/slapadd -q -f "$WORK/slapd/slapd.conf" -l "$WORK/data.ldif" >"$WORK/slapadd.log" 2>&1 ||
  { cat "$WORK/slapadd.log"; exit 1; }
serve_on 0 /usr/sbin/slapd -d 0 -h "ldap://127.0.0.1:$SL_PORT/" -f "$WORK/slapd/slapd.conf" 2>"$WORK/slapd.log" &
PIDS+=($!)

# --- ferrodir --------------------------------------------------------------------------
cat > "$WORK/ferrodir.toml" <<EOF
shards = $SHARDS
listen = "127.0.0.1:$FD_PORT"
suffixes = ["$SUFFIX"]
root_dn = "$ROOT_DN"
root_password = "$ROOT_PW"
example_data = false
access = "open-read"
[dynlist]
members_max = $((MEMBERS * 2))
[log]
level = "warn"
EOF
"$FERRODIR" import --config "$WORK/ferrodir.toml" --data-dir "$WORK/fd" --progress never "$WORK/data.ldif" >"$WORK/import.log" 2>&1 ||
  { cat "$WORK/import.log"; exit 1; }
serve_on 0 "$FERRODIR" serve --config "$WORK/ferrodir.toml" --data-dir "$WORK/fd" >"$WORK/ferrodir.log" 2>&1 &
PIDS+=($!)

# --- the client ------------------------------------------------------------------------
cat > "$WORK/client.py" <<'EOF'
"""One connection, one base search of the group for `member` at a time, for S seconds;
prints searches/s. Checks that the first answer holds exactly N member values."""
import socket, sys, time

def tlv(tag, body):
    n = len(body)
    if n < 0x80:
        head = bytes([n])
    else:
        b = n.to_bytes((n.bit_length() + 7) // 8, "big")
        head = bytes([0x80 | len(b)]) + b
    return bytes([tag]) + head + body

def integer(v):
    return tlv(0x02, v.to_bytes(max(1, (v.bit_length() + 8) // 8), "big"))

def search(msgid, base, attr):
    req = (tlv(0x04, base.encode()) + tlv(0x0A, b"\x00") + tlv(0x0A, b"\x00") + integer(0)
           + integer(0) + tlv(0x01, b"\x00") + tlv(0x87, b"objectClass")
           + tlv(0x30, tlv(0x04, attr.encode())))
    return tlv(0x30, integer(msgid) + tlv(0x63, req))

def read_pdu(sock, buf):
    while True:
        if len(buf) >= 2:
            first = buf[1]
            if first < 0x80:
                hl, length = 2, first
            else:
                k = first & 0x7F
                if len(buf) >= 2 + k:
                    hl, length = 2 + k, int.from_bytes(buf[2:2 + k], "big")
                else:
                    hl = None
            if hl is not None and len(buf) >= hl + length:
                return buf[:hl + length], buf[hl + length:]
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("connection closed")
        buf += chunk

def one(sock, msgid, buf, base):
    sock.sendall(search(msgid, base, "member"))
    pdus = []
    while True:
        pdu, buf = read_pdu(sock, buf)
        pdus.append(pdu)
        # SearchResultDone: [APPLICATION 5] after the messageID.
        hl = 2 if pdu[1] < 0x80 else 2 + (pdu[1] & 0x7F)
        mid_len = pdu[hl + 1]
        if pdu[hl + 2 + mid_len] == 0x65:
            return pdus, buf

host, port, base, n, seconds = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
sock = socket.create_connection((host, port))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b""
pdus, buf = one(sock, 1, buf, base)
entry = pdus[0]
count = entry.count(b"ou=people,dc=example,dc=com")
if count != n:
    raise SystemExit(f"expected {n} members, the first answer holds {count}")
done, msgid = 0, 2
end = time.monotonic() + seconds
while time.monotonic() < end:
    _, buf = one(sock, msgid, buf, base)
    msgid += 1
    done += 1
print(f"{done / seconds:.1f}")
EOF

wait_port() {
  local i
  for i in $(seq 300); do
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$1" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "port $1 did not open" >&2; exit 1
}
wait_port "$SL_PORT"; wait_port "$FD_PORT"

GROUP="cn=dyn,ou=groups,$SUFFIX"
# Warm both (caches, first plans).
for port in "$SL_PORT" "$FD_PORT"; do pin 1 python3 "$WORK/client.py" 127.0.0.1 "$port" "$GROUP" "$MEMBERS" 2 >/dev/null; done
declare -a SL FD
for round in $(seq "$ROUNDS"); do
  s=$(pin 1 python3 "$WORK/client.py" 127.0.0.1 "$SL_PORT" "$GROUP" "$MEMBERS" "$SECONDS_PER")
  f=$(pin 1 python3 "$WORK/client.py" 127.0.0.1 "$FD_PORT" "$GROUP" "$MEMBERS" "$SECONDS_PER")
  SL+=("$s"); FD+=("$f")
  echo "round $round: slapd $s/s  ferrodir $f/s"
done
python3 - "${SL[*]}" "${FD[*]}" "$MEMBERS" "$SHARDS" <<'EOF'
import statistics, sys
sl = [float(x) for x in sys.argv[1].split()]
fd = [float(x) for x in sys.argv[2].split()]
ratios = [f / s for s, f in zip(sl, fd)]
print(f"dynamic group of {sys.argv[3]} members, ferrodir {sys.argv[4]} shards: "
      f"slapd median {statistics.median(sl):.1f}/s, ferrodir median {statistics.median(fd):.1f}/s, "
      f"ratio ferrodir/slapd {statistics.median(ratios):.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
EOF
