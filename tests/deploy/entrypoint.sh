#!/usr/bin/env bash
# Tests deploy/container/entrypoint.sh on the host (CI can't pull base images, so the image
# itself is not built here): the entrypoint runs under /bin/sh with a clean environment and
# the real ferrodir binary ($FERRODIR_BIN) on PATH, on loopback ports.
#
# 1. Refusals: no password and no mounted config; a TLS certificate without a key; a bad
#    boolean. None of them writes a config.
# 2. Escaping: FERRODIR_CONFIG_ONLY=1 with values full of quotes, backslashes and control
#    characters; python's tomllib reads back exactly what was set.
# 2b. A read replica (FERRODIR_REPLICATION_*, FERRODIR_SERVER_ID=ordinal+BASE): its refusals,
#    and the one [[replication]] entry it writes, read back.
# 2c. A multi-provider mesh node (FERRODIR_MULTI_PROVIDER, FERRODIR_MESH_*): its refusals,
#    and for ordinals 0 and 2 of 3 the multi_provider key, the server_id and one
#    [[replication]] entry per other pod, read back (config only: no mesh is started).
# 3. A mounted config is used as it is.
# 4. The real server: the password file wins over the variable, the generated config
#    starts the server (LDAP, LDAPS with a fresh self-signed certificate, metrics), the
#    healthcheck passes, ldapwhoami binds as the configured root DN (a DN with an escaped
#    comma) with a password full of quotes and backslashes, over LDAP and LDAPS (client
#    certificates asked, "try", so every [tls] key the entrypoint writes is read by the
#    server); the variable's password is refused; the log is JSON.
# 5. A read replica of that server from FERRODIR_REPLICATION_* (StartTLS with the CA file):
#    ready once caught up, an add on the provider shows on it, a write on it is referred.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=tests/deploy/lib.sh
source "$here/lib.sh"
entrypoint=$root/deploy/container/entrypoint.sh
: "${FERRODIR_BIN:?set FERRODIR_BIN to the ferrodir binary}"
bin=$(cd "$(dirname "$FERRODIR_BIN")" && pwd)/$(basename "$FERRODIR_BIN")

work=$(mktemp -d)
server_pid=
cleanup() {
    [ -z "$server_pid" ] || stop_pid "$server_pid"
    rm -rf "$work"
}
trap cleanup EXIT

# The entrypoint execs `ferrodir` from PATH.
mkdir "$work/bin"
ln -s "$bin" "$work/bin/ferrodir"

# exec_entrypoint VAR=VALUE...: replaces the calling shell with the entrypoint under
# /bin/sh, with only these variables (and the config paths pointing into $work). Run it
# with `&` only: the background subshell execs env, which execs sh, which execs ferrodir,
# so $! is the server's own PID.
exec_entrypoint() {
    exec env -i PATH="$work/bin:/usr/bin:/bin" \
        FERRODIR_CONFIG="$work/etc/ferrodir.toml" \
        FERRODIR_GENERATED_CONFIG="$work/run/ferrodir.toml" \
        FERRODIR_DATA_DIR="$work/data" \
        "$@" /bin/sh "$entrypoint"
}

# run_entrypoint VAR=VALUE...: the same in the foreground, in a subshell.
run_entrypoint() (
    exec_entrypoint "$@"
)

# expect_refusal WHAT MESSAGE VAR=VALUE...: the entrypoint exits non-zero, says MESSAGE on
# stderr, and writes no config.
expect_refusal() {
    local what=$1 message=$2
    shift 2
    rm -rf "${work:?}/run"
    if run_entrypoint FERRODIR_CONFIG_ONLY=1 "$@" >"$work/out" 2>"$work/err"; then
        fail "$what: the entrypoint should refuse, it exited 0"
    elif ! grep -qF -- "$message" "$work/err"; then
        fail "$what: expected '$message' on stderr, got: $(cat "$work/err")"
    elif [ -e "$work/run/ferrodir.toml" ]; then
        fail "$what: a config was written anyway"
    else
        pass "$what is refused ($(head -c 100 "$work/err"))"
    fi
}

# 0. The script itself, and the Containerfile around it.
if sh -n "$entrypoint" && { ! command -v shellcheck >/dev/null || shellcheck -s sh "$entrypoint"; }; then
    pass "the entrypoint parses under /bin/sh ($(readlink -f /bin/sh))$(command -v shellcheck >/dev/null && echo ', shellcheck clean')"
else
    fail "the entrypoint does not parse under /bin/sh, or shellcheck complains"
fi
containerfile=$root/deploy/container/Containerfile
problems=()
grep -q '^EXPOSE 3389 3636 9390$' "$containerfile" || problems+=("EXPOSE is not 3389 3636 9390")
for default in 0.0.0.0:3389 0.0.0.0:3636 0.0.0.0:9390; do
    grep -qF -- "$default" "$entrypoint" || problems+=("the entrypoint's defaults lack $default")
done
grep -qF 'CMD ["ferrodir", "healthcheck", "--addr", "127.0.0.1:9390"]' "$containerfile" ||
    problems+=("the HEALTHCHECK does not ask 127.0.0.1:9390")
grep -q '^USER 10001:10001$' "$containerfile" || problems+=("USER is not 10001:10001")
grep -q '^VOLUME \["/data"\]$' "$containerfile" || problems+=("VOLUME is not /data")
grep -qF 'cargo build --release --locked --bin ferrodir' "$containerfile" || problems+=("no cargo build --release --locked")
grep -q 'ENTRYPOINT \["/usr/local/bin/ferrodir-entrypoint"\]' "$containerfile" || problems+=("ENTRYPOINT is not the entrypoint")
while read -r source; do
    [ -e "$root/$source" ] || problems+=("COPY $source: no such file in the repository")
done < <(grep -oP '^COPY (?!--from)\K\S+(?= )' "$containerfile" | grep -v '^\.$')
if [ "${#problems[@]}" -eq 0 ]; then
    pass "the Containerfile agrees with the entrypoint (ports, health check, user, volume, files)"
else
    fail "Containerfile: ${problems[*]}"
fi

# 1. Refusals.
expect_refusal "no password and no mounted config" "no root password"
printf '\n' >"$work/empty-password"
expect_refusal "a password file holding only a newline" "is empty" \
    FERRODIR_ROOT_PASSWORD_FILE="$work/empty-password" FERRODIR_ROOT_PASSWORD=x
expect_refusal "a missing password file" "not a readable file" \
    FERRODIR_ROOT_PASSWORD_FILE="$work/none" FERRODIR_ROOT_PASSWORD=x
expect_refusal "a certificate without a key" "FERRODIR_TLS_KEY_FILE" \
    FERRODIR_ROOT_PASSWORD=x FERRODIR_TLS_CERT_FILE=/x.pem
expect_refusal "a bad boolean" "FERRODIR_EXAMPLE_DATA must be true or false" \
    FERRODIR_ROOT_PASSWORD=x FERRODIR_EXAMPLE_DATA=maybe
expect_refusal "a bad log format" "FERRODIR_LOG_FORMAT" \
    FERRODIR_ROOT_PASSWORD=x FERRODIR_LOG_FORMAT=xml

# 2. Escaping, read back by a TOML parser other than the server's.
nasty_password=$'q"u\\o\\"te\'s \\\\ \\n\ttab\x7f\x01 \xc3\xa9 end'
nasty_suffix='o=A \"B\\, C'
# shellcheck disable=SC1003 # the log level ends in a backslash on purpose
if output=$(run_entrypoint FERRODIR_CONFIG_ONLY=1 FERRODIR_ROOT_PASSWORD="$nasty_password" \
    FERRODIR_SUFFIX="$nasty_suffix" FERRODIR_LOG_LEVEL='info,x="\' 2>"$work/err"); then
    if [ "$output" != "$work/run/ferrodir.toml" ]; then
        fail "config-only: printed '$output', not the generated config's path"
    elif [ "$(stat -c %a "$work/run/ferrodir.toml")" != 600 ]; then
        fail "config-only: the generated config (it holds the password) is not mode 600"
    elif ! python3 - "$work/run/ferrodir.toml" "$nasty_password" "$nasty_suffix" <<'EOF'; then
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    config = tomllib.load(f)
password, suffix = sys.argv[2], sys.argv[3]
expected = {
    "root_password": password,
    "suffixes": [suffix],
    "root_dn": "cn=admin," + suffix,
    "data_dir": sys.argv[1].rsplit("/run/", 1)[0] + "/data",
    "listen": "0.0.0.0:3389",
    "metrics_listen": "0.0.0.0:9390",
    "example_data": False,
    "require_tls_for_binds": True,
    "shards": 0,
    "server_id": 0,
    "log": {"level": 'info,x="\\', "format": "json"},
}
wrong = {k: (config.get(k), v) for k, v in expected.items() if config.get(k) != v}
extra = sorted(set(config) - set(expected))
if wrong or extra:
    sys.exit(f"read back differently: {wrong}; unexpected keys: {extra}")
EOF
        fail "config-only: the escaping did not survive"
    else
        pass "quotes, backslashes and control characters survive the TOML escaping"
    fi
else
    fail "config-only run failed: $(cat "$work/err")"
fi

# 2b. A read replica's settings (deploy/kubernetes/statefulset-replica.yaml): one
# [[replication]] entry, and server_id from the pod's ordinal.
expect_refusal "a replication provider that is not an LDAP URL" "must be an ldap:// or ldaps:// URL" \
    FERRODIR_ROOT_PASSWORD=x FERRODIR_REPLICATION_PROVIDER=http://x FERRODIR_REPLICATION_PASSWORD_FILE=/p
expect_refusal "a replication provider without a password file" "needs FERRODIR_REPLICATION_PASSWORD_FILE" \
    FERRODIR_ROOT_PASSWORD=x FERRODIR_REPLICATION_PROVIDER=ldap://x:389
expect_refusal "an ordinal server id on a hostname without one" "needs a hostname ending in -N" \
    FERRODIR_ROOT_PASSWORD=x FERRODIR_SERVER_ID=ordinal+101 FERRODIR_POD_NAME=replica
expect_refusal "a server id above 4095" "at most 4095" FERRODIR_ROOT_PASSWORD=x FERRODIR_SERVER_ID=4096
rm -rf "${work:?}/run"
if run_entrypoint FERRODIR_CONFIG_ONLY=1 FERRODIR_ROOT_PASSWORD=x FERRODIR_POD_NAME=ferrodir-replica-3 \
    FERRODIR_SERVER_ID=ordinal+101 FERRODIR_REPLICATION_PROVIDER=ldap://ferrodir-0.ferrodir-headless:3389 \
    FERRODIR_REPLICATION_STARTTLS=true FERRODIR_REPLICATION_TLS_CA_FILE=/etc/ferrodir/tls/ca.crt \
    FERRODIR_REPLICATION_PASSWORD_FILE=/etc/ferrodir/root/root-password \
    FERRODIR_REPLICATION_UPDATE_REFERRAL=ldap://ferrodir:389 >/dev/null 2>"$work/err" &&
    python3 - "$work/run/ferrodir.toml" <<'EOF'; then
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    config = tomllib.load(f)
expected = [{
    "rid": 1,
    "provider": "ldap://ferrodir-0.ferrodir-headless:3389",
    "starttls": True,
    "tls_ca_file": "/etc/ferrodir/tls/ca.crt",
    "bind_dn": "cn=admin,dc=example,dc=com",
    "password_file": "/etc/ferrodir/root/root-password",
    "search_base": "dc=example,dc=com",
    "type": "refreshAndPersist",
    "retry": "5 10 60 +",
    "update_referral": "ldap://ferrodir:389",
}]
if config.get("server_id") != 104 or config.get("replication") != expected:
    sys.exit(f"server_id {config.get('server_id')}, replication {config.get('replication')}")
EOF
    pass "a replica's config: one [[replication]] entry, server_id 101 + ordinal 3 = 104"
else
    fail "the replica's config: $(cat "$work/err")"
fi

# 2c. A mesh node's settings (deploy/kubernetes/mesh/statefulset.yaml): server_id from the
# pod's ordinal, one [[replication]] entry per peer, found by its stable name.
mesh=(FERRODIR_ROOT_PASSWORD=x FERRODIR_MULTI_PROVIDER=true FERRODIR_MESH_SIZE=3
    FERRODIR_REPLICATION_PASSWORD_FILE=/etc/ferrodir/root/root-password)
expect_refusal "a mesh without its size" "needs FERRODIR_MESH_SIZE" \
    FERRODIR_ROOT_PASSWORD=x FERRODIR_MULTI_PROVIDER=true FERRODIR_POD_NAME=ferrodir-mesh-0 \
    FERRODIR_REPLICATION_PASSWORD_FILE=/p
expect_refusal "a mesh of one" "FERRODIR_MESH_SIZE must be at least 2" \
    "${mesh[@]}" FERRODIR_MESH_SIZE=1 FERRODIR_POD_NAME=ferrodir-mesh-0
expect_refusal "a mesh size that is not a number" "FERRODIR_MESH_SIZE must be a non-negative integer" \
    "${mesh[@]}" FERRODIR_MESH_SIZE=three FERRODIR_POD_NAME=ferrodir-mesh-0
expect_refusal "a mesh node whose name has no ordinal" "needs a pod name ending in -N" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir
expect_refusal "a mesh node whose name ends in a word" "needs a pod name ending in -N" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh
expect_refusal "a mesh node whose ordinal is not below the size" "ordinal 3 (from 'ferrodir-mesh-3') is not below FERRODIR_MESH_SIZE=3" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-3
expect_refusal "a mesh with one fixed server id for every node" "gives each node its own server_id" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-0 FERRODIR_SERVER_ID=1
expect_refusal "a mesh whose server ids start at 0" "must be at least 1" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-1 FERRODIR_SERVER_ID=ordinal+0
expect_refusal "a mesh whose last server id passes 4095" "above 4095" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-0 FERRODIR_SERVER_ID=ordinal+4094
expect_refusal "a mesh node without a password to bind to its peers" "needs FERRODIR_REPLICATION_PASSWORD_FILE" \
    FERRODIR_ROOT_PASSWORD=x FERRODIR_MULTI_PROVIDER=true FERRODIR_MESH_SIZE=3 FERRODIR_POD_NAME=ferrodir-mesh-0
expect_refusal "a mesh node that is also a read replica" "FERRODIR_REPLICATION_PROVIDER is for a read replica" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-0 FERRODIR_REPLICATION_PROVIDER=ldap://elsewhere:389
expect_refusal "a mesh whose retries end" "must retry its peers forever" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-0 FERRODIR_REPLICATION_RETRY="5 10 60 3"
expect_refusal "a mesh name other than the pod's" "a mesh is the pods of one StatefulSet" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-0 FERRODIR_MESH_NAME=ferrodir
expect_refusal "a mesh Service that is not a DNS label" "is not a DNS label" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-0 FERRODIR_MESH_SERVICE=Mesh_Peers
expect_refusal "StartTLS between mesh nodes without a CA" "needs FERRODIR_REPLICATION_TLS_CA_FILE" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-0 FERRODIR_REPLICATION_STARTTLS=true
expect_refusal "StartTLS on an ldaps mesh" "ldaps is TLS already" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-0 FERRODIR_MESH_SCHEME=ldaps \
    FERRODIR_REPLICATION_STARTTLS=true FERRODIR_REPLICATION_TLS_CA_FILE=/ca.crt
expect_refusal "mesh variables without the multi-provider switch" "FERRODIR_MULTI_PROVIDER is not true" \
    FERRODIR_ROOT_PASSWORD=x FERRODIR_MESH_SIZE=3 FERRODIR_POD_NAME=ferrodir-mesh-0
expect_refusal "a multi-provider switch that is not a boolean" "FERRODIR_MULTI_PROVIDER must be true or false" \
    "${mesh[@]}" FERRODIR_POD_NAME=ferrodir-mesh-0 FERRODIR_MULTI_PROVIDER=sometimes

# mesh_config POD SID PEERS URL STARTTLS VAR=VALUE...: the config written for pod POD of a
# 3-node mesh has multi_provider = true, server_id SID and exactly one [[replication]] entry
# per peer ordinal in PEERS (comma-separated), in order: rid = ordinal + 1, provider = URL
# with N replaced by the ordinal, starttls = STARTTLS, and the mesh's common settings.
mesh_config() {
    local pod=$1 sid=$2 peers=$3 url=$4 starttls=$5
    shift 5
    rm -rf "${work:?}/run"
    run_entrypoint FERRODIR_CONFIG_ONLY=1 "${mesh[@]}" FERRODIR_POD_NAME="$pod" "$@" >/dev/null 2>"$work/err" &&
        python3 - "$work/run/ferrodir.toml" "$sid" "$peers" "$url" "$starttls" 2>"$work/err" <<'EOF'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    config = tomllib.load(f)
sid, peers, url = int(sys.argv[2]), [int(p) for p in sys.argv[3].split(",")], sys.argv[4]
expected = [{
    "rid": peer + 1,
    "provider": url.replace("N", str(peer)),
    "starttls": sys.argv[5] == "true",
    "tls_ca_file": "/etc/ferrodir/tls/ca.crt",
    # The root DN: every node has the same, and binds to its peers as it.
    "bind_dn": "cn=Ops\\, Admin,dc=example,dc=com",
    "password_file": "/etc/ferrodir/root/root-password",
    "search_base": "dc=example,dc=com",
    "type": "refreshAndPersist",
    "retry": "5 10 60 +",
} for peer in peers]
problems = []
if config.get("multi_provider") is not True:
    problems.append(f"multi_provider {config.get('multi_provider')!r}")
if config.get("server_id") != sid:
    problems.append(f"server_id {config.get('server_id')!r}, expected {sid}")
if config.get("replication") != expected:
    problems.append(f"replication {config.get('replication')!r}, expected {expected!r}")
if problems:
    sys.exit("; ".join(problems))
EOF
}
mesh_tls=(FERRODIR_ROOT_DN='cn=Ops\, Admin,dc=example,dc=com' FERRODIR_REPLICATION_TLS_CA_FILE=/etc/ferrodir/tls/ca.crt)
if mesh_config ferrodir-mesh-0 1 1,2 ldap://ferrodir-mesh-N.ferrodir-mesh-headless:3389 true "${mesh_tls[@]}" \
    FERRODIR_REPLICATION_STARTTLS=true FERRODIR_MESH_SERVICE=ferrodir-mesh-headless; then
    pass "mesh node 0 of 3: multi_provider, server_id 1, rids 2 and 3 for ferrodir-mesh-1 and -2"
else
    fail "mesh node 0 of 3: $(cat "$work/err")"
fi
if mesh_config ferrodir-mesh-2 3 0,1 ldap://ferrodir-mesh-N.ferrodir-mesh-headless:3389 true "${mesh_tls[@]}" \
    FERRODIR_REPLICATION_STARTTLS=true FERRODIR_MESH_SERVICE=ferrodir-mesh-headless \
    FERRODIR_MESH_NAME=ferrodir-mesh FERRODIR_MESH_PORT=3389; then
    pass "mesh node 2 of 3: multi_provider, server_id 3, rids 1 and 2 for ferrodir-mesh-0 and -1"
else
    fail "mesh node 2 of 3: $(cat "$work/err")"
fi
# ldaps on another port, a DNS domain, a server id base, and the Service name's default
# (the StatefulSet's name + -headless).
if mesh_config dir-1 11 0,2 ldaps://dir-N.dir-headless.ldap.svc.cluster.local:1636 false "${mesh_tls[@]}" \
    FERRODIR_MESH_SCHEME=ldaps FERRODIR_MESH_PORT=1636 FERRODIR_MESH_DOMAIN=ldap.svc.cluster.local \
    FERRODIR_SERVER_ID=ordinal+10; then
    pass "mesh over ldaps on FERRODIR_MESH_PORT with FERRODIR_MESH_DOMAIN: server_id 10 + 1, rids 1 and 3"
else
    fail "mesh node 1 over ldaps: $(cat "$work/err")"
fi
# A negative control for the reader: node 0's config does not pass for node 1.
if mesh_config ferrodir-mesh-0 2 0,2 ldap://ferrodir-mesh-N.ferrodir-mesh-headless:3389 true "${mesh_tls[@]}" \
    FERRODIR_REPLICATION_STARTTLS=true FERRODIR_MESH_SERVICE=ferrodir-mesh-headless; then
    fail "negative control: node 0's config passed as node 1's"
else
    pass "negative control: node 0's config is not taken for node 1's ($(head -c 80 "$work/err"))"
fi

# 3. A mounted config is used as it is.
mkdir -p "$work/etc"
echo 'listen = "127.0.0.1:1"' >"$work/etc/ferrodir.toml"
rm -rf "${work:?}/run"
if output=$(run_entrypoint FERRODIR_CONFIG_ONLY=1 2>"$work/err") &&
    [ "$output" = "$work/etc/ferrodir.toml" ] && [ ! -e "$work/run/ferrodir.toml" ]; then
    pass "a mounted config is used as it is, with no password variable needed"
else
    fail "mounted config: printed '${output:-}', stderr: $(cat "$work/err")"
fi
rm -rf "${work:?}/etc"

# 4. The real server.
ldap_port=$(free_port)
ldaps_port=$(free_port)
metrics_port=$(free_port)
password=$'pa"ss\\wo\\"rd\'\\\\'
printf '%s\n' "$password" >"$work/root-password"
root_dn='cn=Ops\, Admin,dc=example,dc=com'
# A CA and a server certificate it signs (rustls, the replica's client, refuses a CA
# certificate as the server's own).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=entrypoint test CA" -keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost \
    -keyout "$work/tls.key" -out "$work/tls.csr" 2>/dev/null
printf 'basicConstraints=critical,CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' \
    >"$work/tls.ext"
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
    -extfile "$work/tls.ext" -out "$work/tls.crt" 2>/dev/null
exec_entrypoint \
    FERRODIR_ROOT_PASSWORD_FILE="$work/root-password" \
    FERRODIR_ROOT_PASSWORD=the-variable-loses \
    FERRODIR_ROOT_DN="$root_dn" \
    FERRODIR_LISTEN="127.0.0.1:$ldap_port" \
    FERRODIR_LISTEN_LDAPS="127.0.0.1:$ldaps_port" \
    FERRODIR_METRICS_LISTEN="127.0.0.1:$metrics_port" \
    FERRODIR_TLS_CERT_FILE="$work/tls.crt" \
    FERRODIR_TLS_KEY_FILE="$work/tls.key" \
    FERRODIR_TLS_CLIENT_CA_FILE="$work/ca.crt" \
    FERRODIR_TLS_CLIENT_CERTS=try \
    FERRODIR_EXAMPLE_DATA=true \
    FERRODIR_SHARDS=2 \
    >"$work/server.out" 2>"$work/server.log" &
server_pid=$!
if wait_ready "$bin" "127.0.0.1:$metrics_port" "$server_pid"; then
    pass "the generated config starts the server; ferrodir healthcheck --addr passes"
else
    fail "the server did not get ready; its log: $(tail -5 "$work/server.log")"
    finish entrypoint
    exit 1
fi

# ldapwhoami's -y would send the file's trailing newline, which the entrypoint drops.
# Who am I? answers the DN in slapd's pretty form: the escaped comma as \2C.
root_ndn=$(printf '%s' "$root_dn" | sed 's/\\,/\\2C/g')
whoami=$(ldapwhoami -x -H "ldap://127.0.0.1:$ldap_port" -D "$root_dn" -w "$password" 2>&1) || true
if [ "$whoami" = "dn:$root_ndn" ]; then
    pass "ldapwhoami binds as the root DN with the password from the file ($whoami)"
else
    fail "ldapwhoami over LDAP: $whoami"
fi
whoami=$(LDAPTLS_CACERT="$work/ca.crt" LDAPTLS_REQCERT=demand \
    ldapwhoami -x -H "ldaps://127.0.0.1:$ldaps_port" -D "$root_dn" -w "$password" 2>&1) || true
if [ "$whoami" = "dn:$root_ndn" ]; then
    pass "LDAPS on FERRODIR_LISTEN_LDAPS with the certificate from FERRODIR_TLS_CERT_FILE"
else
    fail "ldapwhoami over LDAPS: $whoami"
fi
if ldapwhoami -x -H "ldap://127.0.0.1:$ldap_port" -D "$root_dn" -w the-variable-loses >/dev/null 2>&1; then
    fail "the password from FERRODIR_ROOT_PASSWORD was accepted: the file should win"
else
    pass "the file wins over FERRODIR_ROOT_PASSWORD (its value is refused)"
fi
entries=$(ldapsearch -x -LLL -H "ldap://127.0.0.1:$ldap_port" -b dc=example,dc=com dn | grep -c '^dn:' || true)
if [ "$entries" -gt 1 ]; then
    pass "FERRODIR_EXAMPLE_DATA=true loaded the example tree ($entries entries)"
else
    fail "the example tree is missing ($entries entries)"
fi
if grep -q '^{' "$work/server.log" && ! grep -qv '^{' "$work/server.log"; then
    pass "the log is JSON (FERRODIR_LOG_FORMAT defaults to json)"
else
    fail "the log is not JSON: $(head -2 "$work/server.log")"
fi
# The entrypoint must exec the server (PID 1 in a container gets the signals), and leave
# the password variable behind.
if [ "$(cat "/proc/$server_pid/comm")" != ferrodir ]; then
    fail "pid $server_pid is $(cat "/proc/$server_pid/comm"), not ferrodir: the entrypoint did not exec the server"
elif ! tr '\0' '\n' <"/proc/$server_pid/environ" | grep -q '^FERRODIR_ROOT_DN='; then
    fail "cannot read the server's environment (no FERRODIR_ROOT_DN in it)"
elif tr '\0' '\n' <"/proc/$server_pid/environ" | grep -q '^FERRODIR_ROOT_PASSWORD='; then
    fail "FERRODIR_ROOT_PASSWORD is still in the server's environment"
else
    pass "the entrypoint execs the server (pid $server_pid is ferrodir), without FERRODIR_ROOT_PASSWORD in its environment"
fi

# 5. A read replica from the entrypoint's variables, as deploy/kubernetes starts one: it
# replicates from the server above over StartTLS (verified with the CA file), binds as its
# root DN with the password file, turns ready once caught up, follows a change, and refers
# writes to the provider.
replica_ldap_port=$(free_port)
replica_metrics_port=$(free_port)
(
    exec_entrypoint \
        FERRODIR_DATA_DIR="$work/replica-data" \
        FERRODIR_GENERATED_CONFIG="$work/replica-run/ferrodir.toml" \
        FERRODIR_ROOT_PASSWORD_FILE="$work/root-password" \
        FERRODIR_ROOT_DN="$root_dn" \
        FERRODIR_LISTEN="127.0.0.1:$replica_ldap_port" \
        FERRODIR_METRICS_LISTEN="127.0.0.1:$replica_metrics_port" \
        FERRODIR_SERVER_ID=ordinal+101 \
        FERRODIR_POD_NAME=ferrodir-replica-0 \
        FERRODIR_REPLICATION_PROVIDER="ldap://localhost:$ldap_port" \
        FERRODIR_REPLICATION_STARTTLS=true \
        FERRODIR_REPLICATION_TLS_CA_FILE="$work/ca.crt" \
        FERRODIR_REPLICATION_BIND_DN="$root_dn" \
        FERRODIR_REPLICATION_PASSWORD_FILE="$work/root-password" \
        FERRODIR_REPLICATION_UPDATE_REFERRAL="ldap://127.0.0.1:$ldap_port" \
        FERRODIR_REPLICATION_RETRY="1 +" \
        FERRODIR_SHARDS=1
) >"$work/replica.out" 2>"$work/replica.log" &
replica_pid=$!
count_entries() {
    ldapsearch -x -LLL -H "ldap://127.0.0.1:$1" -D "$root_dn" -w "$password" -b dc=example,dc=com dn 2>/dev/null |
        grep -c '^dn:' || true
}
if wait_ready "$bin" "127.0.0.1:$replica_metrics_port" "$replica_pid" &&
    [ "$(count_entries "$replica_ldap_port")" = "$(count_entries "$ldap_port")" ]; then
    pass "a replica from FERRODIR_REPLICATION_* (StartTLS, CA file, password file) is ready with all $entries entries"
else
    fail "the replica did not catch up: $(count_entries "$replica_ldap_port") of $entries entries; its log: $(tail -3 "$work/replica.log")"
fi
printf 'dn: cn=replicated,dc=example,dc=com\nobjectClass: organizationalRole\ncn: replicated\n' |
    ldapadd -x -H "ldap://127.0.0.1:$ldap_port" -D "$root_dn" -w "$password" >/dev/null
seen=
for _ in $(seq 1 100); do
    if ldapsearch -x -LLL -H "ldap://127.0.0.1:$replica_ldap_port" -D "$root_dn" -w "$password" \
        -b cn=replicated,dc=example,dc=com -s base dn 2>/dev/null | grep -q '^dn: cn=replicated'; then
        seen=1
        break
    fi
    sleep 0.1
done
if [ -n "$seen" ]; then
    pass "an add on the provider reaches the replica (refreshAndPersist)"
else
    fail "an add on the provider did not reach the replica within 10 s"
fi
refused=$(printf 'dn: cn=replicated,dc=example,dc=com\nchangetype: delete\n' |
    ldapmodify -x -H "ldap://127.0.0.1:$replica_ldap_port" -D "$root_dn" -w "$password" 2>&1) || true
if grep -q "Referral (10)" <<<"$refused" && grep -qF "ldap://127.0.0.1:$ldap_port" <<<"$refused"; then
    pass "a write on the replica gets a referral to FERRODIR_REPLICATION_UPDATE_REFERRAL"
else
    fail "a write on the replica: $refused"
fi
if grep -q '^server_id = 101$' "$work/replica-run/ferrodir.toml"; then
    pass "the replica's server_id is 101 + its ordinal 0"
else
    fail "the replica's server_id: $(grep server_id "$work/replica-run/ferrodir.toml")"
fi
stop_pid "$replica_pid"

stop_pid "$server_pid"
if kill -0 "$server_pid" 2>/dev/null; then
    fail "the server (pid $server_pid) did not stop"
fi
server_pid=

finish entrypoint
