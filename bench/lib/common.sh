# Shared pieces of bench/run.sh and bench/scale.sh: process bookkeeping, server configs,
# loading, starting, and one ldclt run with its CPU accounting. Sourced, not run.
#
# Binaries and paths come from variables so that scale.sh can point them into an
# unpacked .deb tree instead of the system: FERRODIR SLAPD SLAPADD LDCLT LDAPSEARCH
# SCHEMA_DIR SLAPD_MODULE_DIR TOOLS_DIR (empty when the bench tools are not built).

: "${FERRODIR:=target/release/ferrodir}"
: "${SLAPD:=/usr/sbin/slapd}"
: "${SLAPADD:=/usr/sbin/slapadd}"
: "${LDCLT:=/usr/bin/ldclt}"
: "${LDAPSEARCH:=/usr/bin/ldapsearch}"
: "${SCHEMA_DIR:=/etc/ldap/schema}"
: "${SLAPD_MODULE_DIR:=/usr/lib/ldap}"
: "${TOOLS_DIR:=}"
SUFFIX="dc=example,dc=com"
ROOT_DN="cn=admin,dc=example,dc=com"
ROOT_PW="secret"
UTIL="python3 $(dirname "${BASH_SOURCE[0]}")/util.py"

# --- processes: everything started is tracked by PID and stopped on exit --------------
TRACKED_PIDS=()
track() { TRACKED_PIDS+=("$1"); }

stop_pid() {  # pid: TERM, up to 5 s grace, then KILL; never by name
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
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
index = ["objectClass eq", "uid,mail eq", "cn eq,sub"]
${FD_EXTRA_CONFIG:-}
[limits]
# Per shard; sized to hold the whole data set plus the entries the write scenarios add.
entry_cache_entries_max = $(($2 + 1000))
# redb's page cache per shard, explicit (redb's default, 1 GiB).
storage_cache_bytes_per_shard = 1073741824
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
}

write_slapd_config() {  # file db_dir pid_file
  # back-mdb has no entry cache (it maps the database); maxsize is the map size, 4 GiB
  # for up to 1M entries. Durability: no dbnosync, so every commit is fdatasync'ed.
  cat > "$1" <<CONF
include $SCHEMA_DIR/core.schema
include $SCHEMA_DIR/cosine.schema
include $SCHEMA_DIR/inetorgperson.schema
include $SCHEMA_DIR/nis.schema
pidfile $3
modulepath $SLAPD_MODULE_DIR
moduleload back_mdb
threads 16
# As ferrodir's search_entries_max and search_time_max_s (slapd's defaults; the rootDN is
# not limited on either server).
sizelimit 500
timelimit 3600
database mdb
suffix "$SUFFIX"
rootdn "$ROOT_DN"
rootpw $ROOT_PW
directory $2
maxsize 4294967296
index objectClass eq
index uid eq
index mail eq
index cn eq,sub
# No index on description: the isolation scenario's scans must stay unindexed.
CONF
}

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
wait_ldap() {  # port: the root DSE answers within 30 s
  local i
  for i in $(seq 300); do
    if timeout 2 "$LDAPSEARCH" -x -H "ldap://127.0.0.1:$1" -s base -b "" "(objectClass=*)" 1.1 >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  log "nothing answers on port $1"; return 1
}

start_ferrodir() {  # dir port cpus -> sets FERRODIR_PID
  taskset -c "$3" "$FERRODIR" serve --config "$1/ferrodir.toml" --data-dir "$1/data" \
    --listen "127.0.0.1:$2" > "$1/serve.log" 2>&1 &
  FERRODIR_PID=$!; track $FERRODIR_PID
  wait_ldap "$2"
}

start_slapd() {  # dir port cpus -> sets SLAPD_PID (-d 0 keeps it in the foreground)
  taskset -c "$3" "$SLAPD" -f "$1/slapd.conf" -h "ldap://127.0.0.1:$2/" -d 0 > "$1/serve.log" 2>&1 &
  SLAPD_PID=$!; track $SLAPD_PID
  wait_ldap "$2"
}

start_null() {  # dir port cpus threads -> sets NULL_PID; empty when the tools are missing
  NULL_PID=""
  [ -n "$TOOLS_DIR" ] || return 0
  taskset -c "$3" "$TOOLS_DIR/ldap-null-responder" --listen "127.0.0.1:$2" --threads "$4" \
    > "$1/null.log" 2>&1 &
  NULL_PID=$!; track $NULL_PID
  wait_ldap "$2"
}

warm_read() {  # port: one subtree search of everything as the rootDN
  "$LDAPSEARCH" -x -H "ldap://127.0.0.1:$1" -D "$ROOT_DN" -w "$ROOT_PW" -b "$SUFFIX" \
    -s sub "(objectClass=*)" > /dev/null
}

vmrss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# --- one ldclt run ---------------------------------------------------------------------
# ldclt_start OUTFILE CPUS PORT SAMPLES THREADS ARGS... -> sets LDCLT_PID (tracked).
# CPUS empty = unpinned.
ldclt_start() {
  local out=$1 cpus=$2 port=$3 samples=$4 threads=$5; shift 5
  local pin=()
  [ -n "$cpus" ] && pin=(taskset -c "$cpus")
  "${pin[@]}" timeout -k 5 $((samples * 10 + 40)) "$LDCLT" -h 127.0.0.1 -p "$port" \
    -n "$threads" -N "$samples" -q "$@" > "$out" 2>&1 &
  LDCLT_PID=$!; track $LDCLT_PID
}

# ldclt_measure OUTFILE CPUS PORT SERVER_PID SAMPLES THREADS ARGS... -> sets MEASURE to
# "ops_per_s=.. ops_total=.. errors=.. dead_threads=.. cpu_user_s=.. cpu_sys_s=..": the
# server's utime/stime are read just before and after the run.
ldclt_measure() {
  local out=$1 cpus=$2 port=$3 pid=$4 samples=$5 threads=$6; shift 6
  local before after ignored="" arg prev=""
  for arg in "$@"; do [ "$prev" = -I ] && ignored+="${ignored:+,}$arg"; prev=$arg; done
  before=$($UTIL cpu "$pid")
  ldclt_start "$out" "$cpus" "$port" "$samples" "$threads" "$@"
  wait "$LDCLT_PID" || true
  after=$($UTIL cpu "$pid")
  MEASURE="$($UTIL ldclt "$out" "$ignored" 2>>"$out.errors") $(cpu_delta "$before" "$after")"
}

cpu_delta() {  # "u0 s0" "u1 s1" -> "cpu_user_s=.. cpu_sys_s=.."
  python3 - "$1" "$2" <<'PY'
import os, sys
tick = os.sysconf("SC_CLK_TCK")
(u0, s0), (u1, s1) = (map(int, a.split()) for a in sys.argv[1:3])
print(f"cpu_user_s={(u1-u0)/tick} cpu_sys_s={(s1-s0)/tick}")
PY
}
