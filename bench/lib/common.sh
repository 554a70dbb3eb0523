# Shared pieces of bench/run.sh and bench/scale.sh: process bookkeeping, server configs,
# loading, starting, and one ldclt run with its CPU accounting. Sourced, not run.
#
# Binaries and paths come from variables so that scale.sh can point them into an
# unpacked .deb tree instead of the system: FERRODIR SLAPD SLAPADD LDCLT LDAPSEARCH
# SCHEMA_DIR SLAPD_MODULE_DIR TOOLS_DIR (empty when the bench tools are not built).
# SLAPD_THREADS: slapd's `threads` (default 16, slapd's own default; scale.sh sets it to
# the server's core count, at least 2, slapd's minimum).
# TLS_DIR (empty: no TLS): a folder with server.pem and server.key (see make_tls_pki);
# then ferrodir listens for LDAPS on FD_LDAPS_PORT and slapd on SL_LDAPS_PORT as well.
# ISSUE11=1: the paged, sorted and memberof scenarios (issue #11) run: both servers index
# departmentNumber (the sorted scenario's filter), and slapd loads sssvlv and memberof
# with `index memberOf eq` (ferrodir has paging, sort and memberOf built in). Off by
# default, so that the other scenarios measure the same servers as before.

: "${FERRODIR:=target/release/ferrodir}"
: "${SLAPD:=/usr/sbin/slapd}"
: "${SLAPADD:=/usr/sbin/slapadd}"
: "${LDCLT:=/usr/bin/ldclt}"
: "${LDAPSEARCH:=/usr/bin/ldapsearch}"
: "${SCHEMA_DIR:=/etc/ldap/schema}"
: "${SLAPD_MODULE_DIR:=/usr/lib/ldap}"
: "${TOOLS_DIR:=}"
: "${TLS_DIR:=}"
: "${ISSUE11:=0}"
SUFFIX="dc=example,dc=com"
ROOT_DN="cn=admin,dc=example,dc=com"
ROOT_PW="secret"
UTIL="python3 $(dirname "${BASH_SOURCE[0]}")/util.py"

# --- processes: everything started is tracked by PID and stopped on exit --------------
TRACKED_PIDS=()
track() { TRACKED_PIDS+=("$1"); }

stop_pid() {  # pid: TERM, up to 30 s grace (a clean stop saves the start cache), then KILL; never by name
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

stop_all() {
  local i
  for ((i = ${#TRACKED_PIDS[@]} - 1; i >= 0; i--)); do stop_pid "${TRACKED_PIDS[$i]}"; done
  TRACKED_PIDS=()
}

log() { echo "[bench $(date +%H:%M:%S)] $*" >&2; }

# --- configs ---------------------------------------------------------------------------
write_ferrodir_config() {  # file entries shards
  cat > "$1" <<TOML
${TLS_DIR:+listen_ldaps = \"127.0.0.1:$FD_LDAPS_PORT\"}
suffixes = ["$SUFFIX"]
shards = $3
example_data = false
root_dn = "$ROOT_DN"
root_password = "$ROOT_PW"
engine = "redb"
durability = "power-loss"
access = "${FD_ACCESS:-default}"
# Same indices as slapd below; description is unindexed on both (the isolation scenario's
# scans rely on that).
index = ["objectClass eq", "uid,mail eq", "cn eq,sub"$([ "$ISSUE11" = 1 ] && echo ', "departmentNumber eq"')]
${FD_EXTRA_CONFIG:-}
[limits]
# The whole server's cache budget (entry caches and redb's page caches, issue #14), the
# default written out: FD_CACHE_BYTES=N changes it.
cache_bytes = ${FD_CACHE_BYTES:-1073741824}
${FD_EXTRA_LIMITS:-}
# Search limits for everyone but the rootDN, as slapd's sizelimit and timelimit below
# (both servers' defaults, written out so that they stay the same).
[limits.anonymous]
search_entries_max = 500
search_time_max_s = 3600
[limits.authenticated]
search_entries_max = 500
search_time_max_s = 3600
[log]
level = "warn"
TOML
  [ -z "$TLS_DIR" ] || cat >> "$1" <<TOML
# The same certificate and key as slapd's (bench/lib/common.sh make_tls_pki); no client
# certificates asked; files checked only on SIGHUP.
[tls]
cert_file = "$TLS_DIR/server.pem"
key_file = "$TLS_DIR/server.key"
client_certs = "never"
reload_poll_s = 0
TOML
}

write_slapd_config() {  # file db_dir pid_file
  # back-mdb has no entry cache (it maps the database); maxsize is the map size, 4 GiB
  # for up to 1M entries (SLAPD_MAXSIZE: slapd_maxsize_for N, for more). Durability: no dbnosync, so every commit is fdatasync'ed.
  local tls=""
  # The same certificate and key as ferrodir's (Debian's slapd is built with GnuTLS).
  [ -z "$TLS_DIR" ] || tls="TLSCACertificateFile $TLS_DIR/ca.pem
TLSCertificateFile $TLS_DIR/server.pem
TLSCertificateKeyFile $TLS_DIR/server.key
TLSVerifyClient never"
  local modules="" overlays=""
  [ "$ISSUE11" = 1 ] && modules="moduleload sssvlv
moduleload memberof" && overlays="# Issue #11: server-side sort (RFC 2891) and memberOf, with its equality index.
# slapadd bypasses overlays: the memberOf values are in the LDIF (gen-data.py --memberof).
overlay sssvlv
# sssvlv allows half the threads (8) sorts at once over all connections by default, and
# answers busy (51) beyond: the sorted scenario's 8 connections would hit that now and then.
sssvlv-max 32
overlay memberof
index memberOf eq
index departmentNumber eq"
  cat > "$1" <<CONF
include $SCHEMA_DIR/core.schema
include $SCHEMA_DIR/cosine.schema
include $SCHEMA_DIR/inetorgperson.schema
include $SCHEMA_DIR/nis.schema
pidfile $3
modulepath $SLAPD_MODULE_DIR
moduleload back_mdb
$modules
threads ${SLAPD_THREADS:-16}
# slapadd and slapindex only (the server ignores it): as many tool threads as cores, so
# that slapadd -q indexes in parallel as ferrodir import does (slapd's default is 1).
tool-threads $(nproc)
$tls
# As ferrodir's search_entries_max and search_time_max_s (slapd's defaults; the rootDN is
# not limited on either server).
sizelimit 500
timelimit 3600
database mdb
suffix "$SUFFIX"
rootdn "$ROOT_DN"
rootpw $ROOT_PW
directory $2
maxsize ${SLAPD_MAXSIZE:-4294967296}
index objectClass eq
index uid eq
index mail eq
index cn eq,sub
# No index on description: the isolation scenario's scans must stay unindexed.
$overlays
CONF
}

# --- disk space (issue #28) ------------------------------------------------------------
# What one entry of gen-data.py takes on disk, from docs/BENCHMARKS.md at 1M: the LDIF
# ~303 bytes (909 MB for 3M), ferrodir's data directory 1.21 GB after import and up to
# 2.2 GB with older import paths or after writes, slapd's back-mdb 1.22 GB. Per copy of
# the LDIF 310, ferrodir 2,200, slapd 1,300 bytes, times 1.25 for the write scenarios'
# growth and the file system: 10M entries need about 48 GB with one LDIF.
DISK_LDIF_BYTES_PER_ENTRY=310
DISK_FERRODIR_BYTES_PER_ENTRY=2200
DISK_SLAPD_BYTES_PER_ENTRY=1300
disk_needed_bytes() {  # entries ldif_copies
  echo $(( ($1 * ($2 * DISK_LDIF_BYTES_PER_ENTRY + DISK_FERRODIR_BYTES_PER_ENTRY + DISK_SLAPD_BYTES_PER_ENTRY)) * 5 / 4 ))
}
# disk_check DIR ENTRIES [LDIF_COPIES]: stops the run (exit 3) before anything is
# generated when the file system of DIR has less free space than ENTRIES need.
# DISK_CHECK=0 skips it (the estimate is from our own data; other data may differ).
disk_check() {
  local dir=$1 entries=$2 copies=${3:-1} need avail
  [ "${DISK_CHECK:-1}" = 0 ] && return 0
  need=$(disk_needed_bytes "$entries" "$copies")
  avail=$(df -P -B1 "$dir" | awk 'NR == 2 {print $4}')
  if [ "$avail" -lt "$need" ]; then
    log "not enough disk for $entries entries in $dir: needs about $((need / 1000000)) MB (LDIF x$copies, ferrodir's and slapd's databases, +25 %), $((avail / 1000000)) MB free there; nothing generated (choose a smaller --sizes, another --out, or DISK_CHECK=0)"
    exit 3
  fi
  log "disk: $entries entries need about $((need / 1000000)) MB, $((avail / 1000000)) MB free in $dir"
}
# back-mdb's map must hold the database: 4 GiB up to 1M entries, 4 KiB an entry beyond
# (the map is sparse: only what is written takes disk).
slapd_maxsize_for() { local m=$(( $1 * 4096 )); [ $m -lt 4294967296 ] && m=4294967296; echo $m; }

# --- loading ---------------------------------------------------------------------------
allocated_bytes() { du -s -B1 "$1" | cut -f1; }  # real blocks, not the sparse map size

load_ferrodir() {  # dir ldif entries shards -> prints "seconds bytes"
  local dir=$1 start end
  rm -rf "$dir" && mkdir -p "$dir"
  write_ferrodir_config "$dir/ferrodir.toml" "$3" "$4"
  start=$(date +%s.%N)
  "$FERRODIR" import --config "$dir/ferrodir.toml" --data-dir "$dir/data" "$2" >&2
  end=$(date +%s.%N)
  echo "$(python3 -c "print(round($end-$start,2))") $(allocated_bytes "$dir/data")"
}

load_slapd() {  # dir ldif -> prints "seconds bytes"
  local dir=$1 start end
  rm -rf "$dir" && mkdir -p "$dir/db"
  write_slapd_config "$dir/slapd.conf" "$dir/db" "$dir/slapd.pid"
  start=$(date +%s.%N)
  "$SLAPADD" -q -f "$dir/slapd.conf" -l "$2" >&2
  end=$(date +%s.%N)
  echo "$(python3 -c "print(round($end-$start,2))") $(allocated_bytes "$dir/db")"
}

# --- starting --------------------------------------------------------------------------
wait_ldap() {  # port: the root DSE answers within WAIT_LDAP_S seconds (default 30)
  local i
  for i in $(seq $((${WAIT_LDAP_S:-30} * 10))); do
    if timeout 2 "$LDAPSEARCH" -x -H "ldap://127.0.0.1:$1" -s base -b "" "(objectClass=*)" 1.1 >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  log "nothing answers on port $1 after ${WAIT_LDAP_S:-30} s"; return 1
}

# Another benchmark on this machine may hold our ports: then wait_ldap would see its server
# answer and we would measure that one (ours fails to bind and exits). Refuse to start.
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ensure_port_free() {  # port name
  if port_taken "$1"; then
    log "port $1 already answers (another server running?): not starting $2 (set FD_PORT, SL_PORT, NULL_PORT)"
    return 1
  fi
}
ensure_running() {  # pid name: it answered, but is it ours?
  kill -0 "$1" 2>/dev/null || { log "$2 exited right after starting (see its serve.log)"; return 1; }
}

start_ferrodir() {  # dir port cpus -> sets FERRODIR_PID
  ensure_port_free "$2" ferrodir
  taskset -c "$3" "$FERRODIR" serve --config "$1/ferrodir.toml" --data-dir "$1/data" \
    --listen "127.0.0.1:$2" > "$1/serve.log" 2>&1 &
  FERRODIR_PID=$!; track $FERRODIR_PID
  wait_ldap "$2"
  ensure_running "$FERRODIR_PID" ferrodir
}

start_slapd() {  # dir port cpus -> sets SLAPD_PID (-d 0 keeps it in the foreground)
  local urls="ldap://127.0.0.1:$2/"
  [ -z "$TLS_DIR" ] || urls+=" ldaps://127.0.0.1:$SL_LDAPS_PORT/"
  ensure_port_free "$2" slapd
  taskset -c "$3" "$SLAPD" -f "$1/slapd.conf" -h "$urls" -d 0 > "$1/serve.log" 2>&1 &
  SLAPD_PID=$!; track $SLAPD_PID
  wait_ldap "$2"
  ensure_running "$SLAPD_PID" slapd
}

start_null() {  # dir port cpus threads -> sets NULL_PID; empty when the tools are missing
  NULL_PID=""
  [ -n "$TOOLS_DIR" ] || return 0
  ensure_port_free "$2" "the null responder"
  taskset -c "$3" "$TOOLS_DIR/ldap-null-responder" --listen "127.0.0.1:$2" --threads "$4" \
    > "$1/null.log" 2>&1 &
  NULL_PID=$!; track $NULL_PID
  wait_ldap "$2"
  ensure_running "$NULL_PID" "the null responder"
}

# --- TLS: a CA and a server certificate for 127.0.0.1 -----------------------------------
# make_tls_pki DIR rsa|ecdsa: DIR/ca.pem (+ ca.key) and DIR/server.pem (+ server.key, PKCS#8),
# X.509 v3 with SAN IP:127.0.0.1 and DNS:localhost, serverAuth; RSA 2048 or ECDSA P-256
# for both the CA and the server. Valid for 30 days; made fresh for every run.
make_tls_pki() {
  local dir=$1 key=$2 alg usage
  case $key in
    rsa) alg=(-algorithm RSA -pkeyopt rsa_keygen_bits:2048); usage="digitalSignature, keyEncipherment" ;;
    ecdsa) alg=(-algorithm EC -pkeyopt ec_paramgen_curve:P-256); usage="digitalSignature" ;;
    *) log "unknown TLS key type $key (rsa or ecdsa)"; return 2 ;;
  esac
  mkdir -p "$dir"
  openssl genpkey "${alg[@]}" -out "$dir/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$dir/ca.key" -sha256 -days 30 -subj "/O=Ferrodir bench/CN=bench CA ($key)" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" -out "$dir/ca.pem"
  openssl genpkey "${alg[@]}" -out "$dir/server.key" 2>/dev/null
  openssl req -new -key "$dir/server.key" -subj "/O=Ferrodir bench/CN=127.0.0.1" -out "$dir/server.csr"
  cat > "$dir/server.ext" <<EXT
basicConstraints = critical, CA:FALSE
keyUsage = critical, $usage
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EXT
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -sha256 -days 30 -extfile "$dir/server.ext" -out "$dir/server.pem" 2>/dev/null
  openssl verify -CAfile "$dir/ca.pem" "$dir/server.pem" >/dev/null
}

warm_read() {  # port: one subtree search of everything as the rootDN
  "$LDAPSEARCH" -x -H "ldap://127.0.0.1:$1" -D "$ROOT_DN" -w "$ROOT_PW" -b "$SUFFIX" \
    -s sub "(objectClass=*)" > /dev/null
}

vmrss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
rssanon_kb() { awk '/^RssAnon:/ {print $2}' "/proc/$1/status"; }

# --- one ldclt run ---------------------------------------------------------------------
# ldclt_start OUTFILE CPUS PORT SAMPLES THREADS ARGS... -> sets LDCLT_PID (tracked).
# CPUS empty = unpinned. ldclt's own CPU (user and system seconds, bash's `time` over it
# and everything it waited for) lands in OUTFILE.cpu when it ends: on a machine the client
# shares with the server, that is the other half of the CPU budget an operation costs.
ldclt_start() {
  local out=$1 cpus=$2 port=$3 samples=$4 threads=$5; shift 5
  local pin=()
  [ -n "$cpus" ] && pin=(taskset -c "$cpus")
  ( TIMEFORMAT='client_cpu_user_s=%3U client_cpu_sys_s=%3S'
    time "${pin[@]}" timeout -k 5 $((samples * 10 + 40)) "$LDCLT" -h 127.0.0.1 -p "$port" \
      -n "$threads" -N "$samples" -q "$@" > "$out" 2>&1 ) 2> "$out.cpu" &
  LDCLT_PID=$!; track $LDCLT_PID
}

# The client_cpu_* pair ldclt_start left for OUTFILE (nothing if it left none).
client_cpu() { grep -ho 'client_cpu_user_s=[0-9.]* client_cpu_sys_s=[0-9.]*' "$1.cpu" 2>/dev/null | tail -1; }

# ldclt_measure OUTFILE CPUS PORT SERVER_PID SAMPLES THREADS ARGS... -> sets MEASURE to
# "ops_per_s=.. ops_total=.. errors=.. dead_threads=.. cpu_user_s=.. cpu_sys_s=..
# client_cpu_user_s=.. client_cpu_sys_s=..": the server's utime/stime are read just before
# and after the run, the client's are its own over its whole run.
ldclt_measure() {
  local out=$1 cpus=$2 port=$3 pid=$4 samples=$5 threads=$6; shift 6
  local before after ignored="" arg prev=""
  for arg in "$@"; do [ "$prev" = -I ] && ignored+="${ignored:+,}$arg"; prev=$arg; done
  before=$($UTIL cpu "$pid")
  ldclt_start "$out" "$cpus" "$port" "$samples" "$threads" "$@"
  wait "$LDCLT_PID" || true
  after=$($UTIL cpu "$pid")
  MEASURE="$($UTIL ldclt "$out" "$ignored" 2>>"$out.errors") $(cpu_delta "$before" "$after") $(client_cpu "$out")"
}

cpu_delta() {  # "u0 s0" "u1 s1" -> "cpu_user_s=.. cpu_sys_s=.."
  python3 - "$1" "$2" <<'PY'
import os, sys
tick = os.sysconf("SC_CLK_TCK")
(u0, s0), (u1, s1) = (map(int, a.split()) for a in sys.argv[1:3])
print(f"cpu_user_s={(u1-u0)/tick} cpu_sys_s={(s1-s0)/tick}")
PY
}
