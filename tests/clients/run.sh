#!/usr/bin/env bash
# Real LDAP clients, unmodified, against one ferrodir: SSSD, nslcd, python ldap3, Java's
# JNDI (Keycloak's and Jenkins' query shapes), ruby-net-ldap (GitLab's library) and
# postfix's LDAP tables. Prints one PASS/FAIL line per check, the total time, and
# "clients: N passed, M failed"; exits non-zero if any check fails.
#
#   FERRODIR_BIN=target/debug/ferrodir bash tests/clients/run.sh [CLIENT...]
#
# CLIENT: sssd nslcd ldap3 jndi net-ldap postfix (default: all). KEEP_WORK=1 keeps the
# temporary directory (configs, logs, data) for a look afterwards. Runs as root (the daemons
# run in mount namespaces of their own: unshare -m). Installs nothing: `bash tests/setup.sh
# --all` installs the clients from Debian's packages (sssd-ldap sssd-tools pamtester nslcd
# libnss-ldapd python3-ldap3 default-jdk-headless ruby-net-ldap postfix postfix-ldap) and
# openssl; `bash tests/run.sh --all` runs this against a release build.
#
# The server: a data directory in a temporary directory, 4 shards, LDAP on a loopback port
# with StartTLS (a throwaway CA made here with openssl), loaded by `ferrodir import` with
# $USERS (10,000) posix users and nested groups (make_ldif.py). The clients bind as
# cn=reader, whose plain searches stop at 500 entries (sizeLimitExceeded) while paged ones
# are unlimited, as a slapd admin sets size.soft=500 size.prtotal=unlimited: a client gets
# all 10,002 users only by paging.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=tests/clients/lib.sh
source "$here/lib.sh"
started_at=$SECONDS

FERRODIR_BIN=${FERRODIR_BIN:-$root/target/debug/ferrodir}
case $FERRODIR_BIN in /*) ;; *) FERRODIR_BIN=$root/$FERRODIR_BIN ;; esac
export FERRODIR_BIN

all_clients=(sssd nslcd ldap3 jndi net-ldap postfix)
if [ "$#" -gt 0 ]; then clients=("$@"); else clients=("${all_clients[@]}"); fi

if [ "$(id -u)" -ne 0 ]; then
    echo "tests/clients must run as root (mount namespaces, daemons that drop privileges)" >&2
    exit 1
fi
missing=()
[ -x "$FERRODIR_BIN" ] || [ "${CLIENTS_SERVER:-}" = slapd ] || missing+=("the ferrodir binary at $FERRODIR_BIN (cargo build, or set FERRODIR_BIN)")
for tool in openssl unshare mount timeout; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
/usr/bin/python3 -c 'import ldap3' 2>/dev/null || missing+=("/usr/bin/python3 with ldap3 (python3-ldap3)")
if [ "${#missing[@]}" -gt 0 ]; then
    printf 'tests/clients: missing: %s\n' "${missing[@]}" >&2
    exit 1
fi

export USERS=${USERS:-10000}
export BASE_DN="dc=example,dc=com"
export READER_DN="cn=reader,ou=services,$BASE_DN"
export READER_PW="reader-secret-1"
export USER_PW="alice-and-bob-pw"

CLIENTS_WORK=$(mktemp -d /tmp/ferrodir-clients.XXXXXX)
# The daemons drop privileges (nslcd runs as nslcd) and still read the CA under here.
chmod 755 "$CLIENTS_WORK"
export CLIENTS_WORK
server_pid=""
cleanup() {
    stop_remembered_daemons
    stop_pid "$server_pid"
    if [ -n "${KEEP_WORK:-}" ]; then
        echo "kept $CLIENTS_WORK (KEEP_WORK)"
    else
        rm -rf "$CLIENTS_WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the throwaway CA and the server's certificate (SAN 127.0.0.1 and localhost) ---------
pki=$CLIENTS_WORK/pki
mkdir -p "$pki"
if ! {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj "/CN=ferrodir clients test CA" -keyout "$pki/ca.key" -out "$pki/ca.pem" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign &&
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
            -subj "/CN=127.0.0.1" -keyout "$pki/server.key" -out "$pki/server.csr" &&
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >"$pki/ext.cnf" &&
        openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" \
            -CAcreateserial -days 2 -extfile "$pki/ext.cnf" -out "$pki/server.pem"
} >"$pki/openssl.log" 2>&1; then
    cat "$pki/openssl.log" >&2
    echo "tests/clients: making the test CA failed" >&2
    exit 1
fi
chmod 644 "$pki"/*.pem
export CA_FILE=$pki/ca.pem

# --- the server ----------------------------------------------------------------------------
LDAP_PORT=$(free_port)
metrics_port=$(free_port)
export LDAP_PORT LDAP_URI="ldap://127.0.0.1:$LDAP_PORT"
export SERVER_LOG=$CLIENTS_WORK/server.log
cat >"$CLIENTS_WORK/ferrodir.toml" <<EOF
listen = "127.0.0.1:$LDAP_PORT"
metrics_listen = "127.0.0.1:$metrics_port"
data_dir = "$CLIENTS_WORK/data"
suffixes = ["$BASE_DN"]
root_dn = "cn=admin,$BASE_DN"
root_password = "admin-secret"
shards = 4
example_data = false
index = [
  "objectClass eq",
  "uid,mail,cn,sn,member,uniqueMember,memberUid,uidNumber,gidNumber,entryUUID eq",
  "uid pres",
]

[limits.anonymous]
search_entries_max = 500

[limits.authenticated]
search_entries_max = 500

# The clients' service account: plain searches stop at 500 entries, paged ones go on (as
# slapd's size.soft=500 size.pr=1000 size.prtotal=unlimited).
[[limits.identities]]
dn = "$READER_DN"
search_entries_max = 500
paged_page_entries_max = 1000
paged_total_entries_max = 0

[log]
level = "info"

[access_log]
enabled = true
path = "-"

[tls]
cert_file = "$pki/server.pem"
key_file = "$pki/server.key"
EOF

export SERVER_NAME=${CLIENTS_SERVER:-ferrodir}
echo "tests/clients against $SERVER_NAME: ${clients[*]}"
phase=$SECONDS
/usr/bin/python3 "$here/make_ldif.py" "$USERS" "$USER_PW" "$READER_PW" >"$CLIENTS_WORK/data.ldif"
if [ "$SERVER_NAME" = slapd ]; then
    # The suite's own check: OpenLDAP's slapd with sssvlv and memberof, set up as ferrodir
    # is, where every client check should pass (reference_slapd.sh).
    # shellcheck source=tests/clients/reference_slapd.sh
    source "$here/reference_slapd.sh"
    start_reference_slapd || exit 1
else
    echo "ferrodir: $FERRODIR_BIN"
    if ! "$FERRODIR_BIN" import --config "$CLIENTS_WORK/ferrodir.toml" --data-dir "$CLIENTS_WORK/data" \
        --progress never "$CLIENTS_WORK/data.ldif" >"$CLIENTS_WORK/import.log" 2>&1; then
        log_tail "ferrodir import" "$CLIENTS_WORK/import.log"
        echo "tests/clients: importing the test data failed" >&2
        exit 1
    fi
    NO_COLOR=1 "$FERRODIR_BIN" serve --config "$CLIENTS_WORK/ferrodir.toml" >"$SERVER_LOG" 2>&1 &
    server_pid=$!
    if ! wait_for 60 "$FERRODIR_BIN" healthcheck --addr "127.0.0.1:$metrics_port"; then
        log_tail ferrodir "$SERVER_LOG"
        echo "tests/clients: the server did not become ready" >&2
        exit 1
    fi
fi
echo "server ready on $LDAP_URI with $((USERS + 2)) users ($((SECONDS - phase)) s to generate, import and start)"

# --- the clients -----------------------------------------------------------------------------
results=$CLIENTS_WORK/results
: >"$results"
# run_client NAME COMMAND...: runs one client's script with a time limit, shows its lines
# as they come, and records a FAIL when it dies without saying why; on any FAIL, the
# server's log tail follows (the client's own daemon log is printed by its script).
run_client() {
    local name=$1 out=$CLIENTS_WORK/$1.out start=$SECONDS rc
    shift
    echo "== $name"
    timeout -k 10 "${CLIENT_TIMEOUT_S:-180}" "$@" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    stop_remembered_daemons
    grep -E '^(PASS|FAIL) ' "$out" >>"$results"
    if [ "$rc" -ne 0 ] && ! grep -q '^FAIL ' "$out"; then
        echo "FAIL $name: the script exited $rc (124: past its time limit) without a verdict" | tee -a "$results"
    fi
    if ! grep -q -E '^(PASS|FAIL) ' "$out"; then
        echo "FAIL $name: no check ran" | tee -a "$results"
    fi
    if grep -q "^FAIL $name" "$results"; then
        log_tail "$SERVER_NAME" "$SERVER_LOG" 30
    fi
    echo "   ($name: $((SECONDS - start)) s)"
}

for client in "${clients[@]}"; do
    case $client in
        sssd) run_client sssd unshare -m --propagation private bash "$here/sssd.sh" ;;
        nslcd) run_client nslcd unshare -m --propagation private bash "$here/nslcd.sh" ;;
        ldap3) run_client ldap3 /usr/bin/python3 "$here/ldap3_client.py" ;;
        jndi) run_client jndi bash "$here/jndi.sh" ;;
        net-ldap)
            # shellcheck disable=SC2016  # $1 is the inner shell's
            run_client net-ldap bash -c 'command -v ruby >/dev/null || { echo "FAIL net-ldap: ruby is not installed (ruby-net-ldap)"; exit 1; }; exec ruby "$1"' _ "$here/net_ldap.rb" ;;
        postfix) run_client postfix bash "$here/postfix.sh" ;;
        *) echo "FAIL $client: no such client (${all_clients[*]})" | tee -a "$results" ;;
    esac
done

if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "FAIL $SERVER_NAME: the server exited during the tests" | tee -a "$results"
    log_tail "$SERVER_NAME" "$SERVER_LOG"
fi

echo "== summary"
sort -s -k1,1r "$results" | sed 's/^/  /'
passed=$(grep -c '^PASS ' "$results")
failed=$(grep -c '^FAIL ' "$results")
echo "tests/clients took $((SECONDS - started_at)) s"
echo "clients: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
