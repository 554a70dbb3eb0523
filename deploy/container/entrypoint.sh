#!/bin/sh
# The container's entrypoint: writes a ferrodir config from FERRODIR_* environment
# variables, then execs `ferrodir serve --config ...` (PID 1 is the server itself, so
# SIGTERM reaches it and SIGHUP reloads the TLS pair).
#
# - A config mounted at $FERRODIR_CONFIG (/etc/ferrodir/ferrodir.toml) is used as it is and
#   every other FERRODIR_* variable is ignored.
# - Arguments that start with "-" are added to `ferrodir serve`; any other first argument is
#   run instead of the server (`ferrodir verify --data-dir /data`, `sh`).
# - FERRODIR_CONFIG_ONLY=1 writes the config, prints its path and exits (the host-side test,
#   tests/deploy/entrypoint.sh, uses it; so can an operator who wants to see the result).
#
# The variables are documented in docs/OPERATIONS.md ("Deploying: containers, ...").
# POSIX sh only: the image's /bin/sh is dash.
set -eu

die() {
    printf 'ferrodir-entrypoint: %s\n' "$*" >&2
    exit 1
}

note() {
    printf 'ferrodir-entrypoint: %s\n' "$*" >&2
}

# Prints $1 as a TOML basic string, quotes included. TOML (v1.0.0, "String") requires a
# backslash and a double quote to be escaped, and forbids raw control characters
# (U+0000-U+001F but tab, and U+007F): those become \uXXXX. Everything else, UTF-8
# included, stands as it is. The value reaches awk through ENVIRON, never `awk -v`, which
# would interpret backslash escapes in it.
toml_string() {
    TOML_STRING_VALUE=$1 awk 'BEGIN {
        for (i = 1; i < 128; i++) code[sprintf("%c", i)] = i
        value = ENVIRON["TOML_STRING_VALUE"]
        out = "\""
        n = length(value)
        for (i = 1; i <= n; i++) {
            c = substr(value, i, 1)
            if (c == "\\") out = out "\\\\"
            else if (c == "\"") out = out "\\\""
            else if ((c in code) && (code[c] < 32 || code[c] == 127)) out = out sprintf("\\u%04X", code[c])
            else out = out c
        }
        printf "%s\"", out
    }'
}

# Prints "true" or "false" for the boolean variable named $1 whose value is $2.
toml_bool() {
    case $2 in
        true | TRUE | True | yes | 1) printf 'true' ;;
        false | FALSE | False | no | 0) printf 'false' ;;
        *) die "$1 must be true or false, not '$2'" ;;
    esac
}

# Prints the non-negative integer variable named $1 whose value is $2.
toml_count() {
    case $2 in
        '' | *[!0-9]*) die "$1 must be a non-negative integer, not '$2'" ;;
        *) printf '%s' "$2" ;;
    esac
}

# The root password: the file wins over the variable. Trailing newlines of the file are
# dropped (`echo secret > file` and most Secret tooling add one); a password can't end in
# a newline.
root_password() {
    if [ -n "${FERRODIR_ROOT_PASSWORD_FILE:-}" ]; then
        if ! { [ -f "$FERRODIR_ROOT_PASSWORD_FILE" ] && [ -r "$FERRODIR_ROOT_PASSWORD_FILE" ]; }; then
            die "FERRODIR_ROOT_PASSWORD_FILE=$FERRODIR_ROOT_PASSWORD_FILE is not a readable file"
        fi
        password=$(cat -- "$FERRODIR_ROOT_PASSWORD_FILE")
        [ -n "$password" ] || die "FERRODIR_ROOT_PASSWORD_FILE=$FERRODIR_ROOT_PASSWORD_FILE is empty"
        printf '%s' "$password"
    elif [ -n "${FERRODIR_ROOT_PASSWORD:-}" ]; then
        printf '%s' "$FERRODIR_ROOT_PASSWORD"
    else
        die "no root password: set FERRODIR_ROOT_PASSWORD_FILE (a file holding it, e.g. a mounted" \
            "Secret) or FERRODIR_ROOT_PASSWORD, or mount a config at $user_config;" \
            "refusing to start with a default password"
    fi
}

# A multi-provider mesh (FERRODIR_MULTI_PROVIDER=true), one StatefulSet whose pods are
# NAME-0 ... NAME-(SIZE-1): this pod finds its ordinal in its own name and consumes from
# every other pod, by the stable name the headless Service gives it
# (NAME-i.SERVICE[.DOMAIN]). Checks the variables and sets the mesh_* values that
# mesh_tables writes; called from write_config before server_id is worked out (its pod name
# checks come first, with the clearer messages).
mesh_settings() {
    [ -z "${FERRODIR_REPLICATION_PROVIDER:-}" ] ||
        die "FERRODIR_REPLICATION_PROVIDER is for a read replica; with FERRODIR_MULTI_PROVIDER=true the providers are the other nodes of the mesh"
    [ -z "${FERRODIR_REPLICATION_UPDATE_REFERRAL:-}" ] ||
        die "FERRODIR_REPLICATION_UPDATE_REFERRAL is for a read replica; every node of a mesh takes writes itself"
    [ -n "${FERRODIR_MESH_SIZE:-}" ] ||
        die "FERRODIR_MULTI_PROVIDER=true needs FERRODIR_MESH_SIZE (the number of nodes, this one included)"
    mesh_size=$(toml_count FERRODIR_MESH_SIZE "$FERRODIR_MESH_SIZE")
    case $mesh_size in
        0?*) die "FERRODIR_MESH_SIZE must be written without leading zeros, not '$mesh_size'" ;;
    esac
    [ "$mesh_size" -ge 2 ] || die "FERRODIR_MESH_SIZE must be at least 2 (a mesh of one has no peer), not $mesh_size"
    # rids are 1-999 and each peer's is its ordinal + 1.
    [ "$mesh_size" -le 999 ] || die "FERRODIR_MESH_SIZE must be at most 999 (one rid per peer), not $mesh_size"

    host=${FERRODIR_POD_NAME:-$(hostname)}
    mesh_ordinal=${host##*-}
    case $host in
        ?*-*) ;;
        *) die "FERRODIR_MULTI_PROVIDER=true needs a pod name ending in -N (a StatefulSet's), not '$host'" ;;
    esac
    case $mesh_ordinal in
        '' | *[!0-9]*) die "FERRODIR_MULTI_PROVIDER=true needs a pod name ending in -N (a StatefulSet's), not '$host'" ;;
        0?*) die "the ordinal in '$host' has a leading zero; a StatefulSet's pods are name-0, name-1, ..." ;;
    esac
    [ "$mesh_ordinal" -lt "$mesh_size" ] ||
        die "this pod's ordinal $mesh_ordinal (from '$host') is not below FERRODIR_MESH_SIZE=$mesh_size:" \
            "set FERRODIR_MESH_SIZE to the StatefulSet's replicas"
    mesh_name=${FERRODIR_MESH_NAME:-${host%-*}}
    [ "$mesh_name" = "${host%-*}" ] ||
        die "FERRODIR_MESH_NAME=$mesh_name, but this pod is '$host': a mesh is the pods of one StatefulSet, named $mesh_name-N"
    mesh_service=${FERRODIR_MESH_SERVICE:-$mesh_name-headless}
    for label in "$mesh_name" "$mesh_service"; do
        case $label in
            '' | *[!a-z0-9-]* | -* | *-) die "'$label' is not a DNS label (a-z, 0-9 and -, not at either end)" ;;
        esac
    done
    mesh_domain=${FERRODIR_MESH_DOMAIN:-}
    case $mesh_domain in
        *[!a-z0-9.-]* | .* | *. | *..*) die "FERRODIR_MESH_DOMAIN must be a DNS name like ns.svc.cluster.local, not '$mesh_domain'" ;;
    esac

    mesh_scheme=${FERRODIR_MESH_SCHEME:-ldap}
    case $mesh_scheme in
        ldap) mesh_port=${FERRODIR_MESH_PORT:-3389} ;;
        ldaps) mesh_port=${FERRODIR_MESH_PORT:-3636} ;;
        *) die "FERRODIR_MESH_SCHEME must be ldap or ldaps, not '$mesh_scheme'" ;;
    esac
    mesh_port=$(toml_count FERRODIR_MESH_PORT "$mesh_port")
    { [ "$mesh_port" -ge 1 ] && [ "$mesh_port" -le 65535 ]; } || die "FERRODIR_MESH_PORT must be 1-65535, not $mesh_port"
    mesh_starttls_toml=$(toml_bool FERRODIR_REPLICATION_STARTTLS "${FERRODIR_REPLICATION_STARTTLS:-false}")
    if [ "$mesh_scheme" = ldaps ] && [ "$mesh_starttls_toml" = true ]; then
        die "FERRODIR_REPLICATION_STARTTLS=true is for FERRODIR_MESH_SCHEME=ldap; ldaps is TLS already"
    fi
    mesh_ca_toml=
    if [ -n "${FERRODIR_REPLICATION_TLS_CA_FILE:-}" ]; then
        mesh_ca_toml=$(toml_string "$FERRODIR_REPLICATION_TLS_CA_FILE")
    elif [ "$mesh_scheme" = ldaps ] || [ "$mesh_starttls_toml" = true ]; then
        die "TLS between the nodes needs FERRODIR_REPLICATION_TLS_CA_FILE (the CA that verifies the peers' certificates)"
    fi

    [ -n "${FERRODIR_REPLICATION_PASSWORD_FILE:-}" ] ||
        die "FERRODIR_MULTI_PROVIDER=true needs FERRODIR_REPLICATION_PASSWORD_FILE (the password this node binds to its peers with)"
    mesh_password_file_toml=$(toml_string "$FERRODIR_REPLICATION_PASSWORD_FILE")
    # Every node has the same root DN (one set of variables for the whole StatefulSet), so
    # that is the identity a node binds to its peers with unless told otherwise.
    mesh_bind_dn_toml=$(toml_string "${FERRODIR_REPLICATION_BIND_DN:-${FERRODIR_ROOT_DN:-cn=admin,$suffix}}")
    # All the nodes hold the whole suffix and write anywhere in it.
    if [ -n "${FERRODIR_REPLICATION_SEARCH_BASE:-}" ] && [ "$FERRODIR_REPLICATION_SEARCH_BASE" != "$suffix" ]; then
        die "FERRODIR_REPLICATION_SEARCH_BASE=$FERRODIR_REPLICATION_SEARCH_BASE: a mesh replicates the whole suffix ($suffix)"
    fi
    mesh_base_toml=$(toml_string "$suffix")
    # A peer that is down for a while (rescheduled, its node drained) must be followed
    # again when it comes back, however long that takes: the schedule ends in forever.
    mesh_retry=${FERRODIR_REPLICATION_RETRY:-5 10 60 +}
    case " $mesh_retry " in
        *[[:space:]]+[[:space:]]) ;;
        *) die "FERRODIR_REPLICATION_RETRY='$mesh_retry': a mesh node must retry its peers forever (end the schedule in +)" ;;
    esac
    mesh_retry_toml=$(toml_string "$mesh_retry")
}

# Writes one [[replication]] table per peer (every ordinal but this pod's): rid is the
# peer's ordinal + 1, so a node's rids name the same peers as every other node's.
mesh_tables() {
    peer=0
    while [ "$peer" -lt "$mesh_size" ]; do
        if [ "$peer" -ne "$mesh_ordinal" ]; then
            host_name=$mesh_name-$peer.$mesh_service${mesh_domain:+.$mesh_domain}
            printf '\n[[replication]]\nrid = %s\n' $((peer + 1))
            printf 'provider = "%s://%s:%s"\n' "$mesh_scheme" "$host_name" "$mesh_port"
            printf 'starttls = %s\n' "$mesh_starttls_toml"
            [ -z "$mesh_ca_toml" ] || printf 'tls_ca_file = %s\n' "$mesh_ca_toml"
            printf 'bind_dn = %s\npassword_file = %s\n' "$mesh_bind_dn_toml" "$mesh_password_file_toml"
            printf 'search_base = %s\ntype = "refreshAndPersist"\nretry = %s\n' "$mesh_base_toml" "$mesh_retry_toml"
        fi
        peer=$((peer + 1))
    done
}

# Writes the config from the environment to $generated_config (mode 0600: it holds the
# root password), through a temporary file renamed into place.
write_config() {
    suffix=${FERRODIR_SUFFIX:-dc=example,dc=com}
    # Every value is escaped here, in assignments, so that a refusal (die in a command
    # substitution) stops the script under `set -e`.
    password=$(root_password)
    password_toml=$(toml_string "$password")
    suffix_toml=$(toml_string "$suffix")
    root_dn_toml=$(toml_string "${FERRODIR_ROOT_DN:-cn=admin,$suffix}")
    listen_toml=$(toml_string "${FERRODIR_LISTEN:-0.0.0.0:3389}")
    metrics_toml=$(toml_string "${FERRODIR_METRICS_LISTEN:-0.0.0.0:9390}")
    data_dir_toml=$(toml_string "${FERRODIR_DATA_DIR:-/data}")
    example_toml=$(toml_bool FERRODIR_EXAMPLE_DATA "${FERRODIR_EXAMPLE_DATA:-false}")
    require_tls_toml=$(toml_bool FERRODIR_REQUIRE_TLS_FOR_BINDS "${FERRODIR_REQUIRE_TLS_FOR_BINDS:-true}")
    shards_toml=$(toml_count FERRODIR_SHARDS "${FERRODIR_SHARDS:-0}")
    log_level_toml=$(toml_string "${FERRODIR_LOG_LEVEL:-info}")
    log_format=${FERRODIR_LOG_FORMAT:-json}
    case $log_format in
        text | json) ;;
        *) die "FERRODIR_LOG_FORMAT must be text or json, not '$log_format'" ;;
    esac

    cert=${FERRODIR_TLS_CERT_FILE:-}
    key=${FERRODIR_TLS_KEY_FILE:-}
    if { [ -n "$cert" ] && [ -z "$key" ]; } || { [ -z "$cert" ] && [ -n "$key" ]; }; then
        die "set both FERRODIR_TLS_CERT_FILE and FERRODIR_TLS_KEY_FILE, or neither"
    fi
    client_ca=${FERRODIR_TLS_CLIENT_CA_FILE:-}
    client_certs=${FERRODIR_TLS_CLIENT_CERTS:-never}
    case $client_certs in
        never | try | demand) ;;
        *) die "FERRODIR_TLS_CLIENT_CERTS must be never, try or demand, not '$client_certs'" ;;
    esac
    if [ -z "$cert" ] && { [ -n "$client_ca" ] || [ "$client_certs" != never ]; }; then
        die "FERRODIR_TLS_CLIENT_CA_FILE and FERRODIR_TLS_CLIENT_CERTS need FERRODIR_TLS_CERT_FILE and FERRODIR_TLS_KEY_FILE"
    fi
    if [ -n "$cert" ]; then
        ldaps_toml=$(toml_string "${FERRODIR_LISTEN_LDAPS:-0.0.0.0:3636}")
        cert_toml=$(toml_string "$cert")
        key_toml=$(toml_string "$key")
        client_certs_toml=$(toml_string "$client_certs")
        client_ca_toml=
        [ -z "$client_ca" ] || client_ca_toml=$(toml_string "$client_ca")
    fi

    # server_id: a number, or "ordinal+BASE": BASE plus the ordinal at the end of the pod's
    # name (FERRODIR_POD_NAME, else the hostname: ferrodir-replica-2 -> BASE+2), so every
    # pod of a StatefulSet has its own.
    multi_provider=$(toml_bool FERRODIR_MULTI_PROVIDER "${FERRODIR_MULTI_PROVIDER:-false}")
    if [ "$multi_provider" = true ]; then
        mesh_settings
    elif [ -n "${FERRODIR_MESH_SIZE:-}${FERRODIR_MESH_NAME:-}${FERRODIR_MESH_SERVICE:-}${FERRODIR_MESH_DOMAIN:-}${FERRODIR_MESH_SCHEME:-}${FERRODIR_MESH_PORT:-}" ]; then
        # Without the switch every pod would be a directory of its own, silently.
        die "FERRODIR_MESH_* variables are set but FERRODIR_MULTI_PROVIDER is not true"
    fi
    server_id=${FERRODIR_SERVER_ID:-0}
    if [ "$multi_provider" = true ]; then
        # Every node of a mesh stamps its own sid into the CSNs it makes; two nodes with one
        # sid would each take the other's changes for their own. So a mesh takes the sid
        # from the ordinal only: unset means ordinal+1 (ferrodir-mesh-0 is 1).
        server_id=${FERRODIR_SERVER_ID:-ordinal+1}
        case $server_id in
            ordinal+*) ;;
            *) die "FERRODIR_MULTI_PROVIDER=true gives each node its own server_id from its ordinal:" \
                "leave FERRODIR_SERVER_ID unset (ordinal+1) or set it to ordinal+BASE, not '$server_id'" ;;
        esac
    fi
    case $server_id in
        ordinal+*)
            base=$(toml_count FERRODIR_SERVER_ID "${server_id#ordinal+}")
            host=${FERRODIR_POD_NAME:-$(hostname)}
            ordinal=${host##*-}
            case $ordinal in
                '' | *[!0-9]*) die "FERRODIR_SERVER_ID=$server_id needs a hostname ending in -N, not '$host'" ;;
            esac
            case $ordinal in
                0?*) die "the ordinal in '$host' has a leading zero; a StatefulSet's pods are name-0, name-1, ..." ;;
            esac
            server_id=$((base + ordinal))
            ;;
        *) server_id=$(toml_count FERRODIR_SERVER_ID "$server_id") ;;
    esac
    [ "$server_id" -le 4095 ] || die "FERRODIR_SERVER_ID must be at most 4095, not $server_id"
    if [ "$multi_provider" = true ]; then
        # server_id is BASE + this ordinal, so the last peer's is BASE + SIZE - 1: every
        # node's must be 1-4095 (0 is a lone server's).
        [ $((server_id - mesh_ordinal)) -ge 1 ] ||
            die "a mesh node's server_id must be at least 1: FERRODIR_SERVER_ID=ordinal+BASE with BASE 1 or more"
        [ $((server_id - mesh_ordinal + mesh_size - 1)) -le 4095 ] ||
            die "FERRODIR_SERVER_ID=${FERRODIR_SERVER_ID:-ordinal+1}: the last of $mesh_size nodes would get a server_id above 4095"
    fi

    # A read replica: FERRODIR_REPLICATION_PROVIDER set writes one [[replication]] entry
    # for the whole suffix (docs/OPERATIONS.md, "Replication consumer").
    provider=${FERRODIR_REPLICATION_PROVIDER:-}
    if [ -n "$provider" ]; then
        case $provider in
            ldap://* | ldaps://*) ;;
            *) die "FERRODIR_REPLICATION_PROVIDER must be an ldap:// or ldaps:// URL, not '$provider'" ;;
        esac
        [ -n "${FERRODIR_REPLICATION_PASSWORD_FILE:-}" ] ||
            die "FERRODIR_REPLICATION_PROVIDER needs FERRODIR_REPLICATION_PASSWORD_FILE (the bind DN's password)"
        repl_provider_toml=$(toml_string "$provider")
        repl_bind_dn_toml=$(toml_string "${FERRODIR_REPLICATION_BIND_DN:-cn=admin,$suffix}")
        repl_password_file_toml=$(toml_string "$FERRODIR_REPLICATION_PASSWORD_FILE")
        repl_base_toml=$(toml_string "${FERRODIR_REPLICATION_SEARCH_BASE:-$suffix}")
        repl_starttls_toml=$(toml_bool FERRODIR_REPLICATION_STARTTLS "${FERRODIR_REPLICATION_STARTTLS:-false}")
        repl_ca_toml=
        [ -z "${FERRODIR_REPLICATION_TLS_CA_FILE:-}" ] || repl_ca_toml=$(toml_string "$FERRODIR_REPLICATION_TLS_CA_FILE")
        repl_referral_toml=
        [ -z "${FERRODIR_REPLICATION_UPDATE_REFERRAL:-}" ] ||
            repl_referral_toml=$(toml_string "$FERRODIR_REPLICATION_UPDATE_REFERRAL")
        repl_retry_toml=$(toml_string "${FERRODIR_REPLICATION_RETRY:-5 10 60 +}")
    fi

    mkdir -p -- "$(dirname -- "$generated_config")"
    temporary="$generated_config.tmp.$$"
    (
        umask 077
        {
            printf '# Written by the ferrodir container entrypoint from FERRODIR_* variables.\n'
            printf '# Mount a config at %s to use your own instead.\n' "$user_config"
            printf 'listen = %s\n' "$listen_toml"
            [ -z "$cert" ] || printf 'listen_ldaps = %s\n' "$ldaps_toml"
            printf 'metrics_listen = %s\n' "$metrics_toml"
            printf 'require_tls_for_binds = %s\n' "$require_tls_toml"
            printf 'data_dir = %s\n' "$data_dir_toml"
            printf 'suffixes = [%s]\n' "$suffix_toml"
            printf 'root_dn = %s\n' "$root_dn_toml"
            printf 'root_password = %s\n' "$password_toml"
            printf 'shards = %s\n' "$shards_toml"
            printf 'example_data = %s\n' "$example_toml"
            printf 'server_id = %s\n' "$server_id"
            [ "$multi_provider" = false ] || printf 'multi_provider = true\n'
            printf '\n[log]\nlevel = %s\nformat = "%s"\n' "$log_level_toml" "$log_format"
            if [ -n "$cert" ]; then
                printf '\n[tls]\ncert_file = %s\nkey_file = %s\n' "$cert_toml" "$key_toml"
                printf 'client_certs = %s\n' "$client_certs_toml"
                [ -z "$client_ca_toml" ] || printf 'client_ca_file = %s\n' "$client_ca_toml"
            fi
            if [ -n "$provider" ]; then
                printf '\n[[replication]]\nrid = 1\nprovider = %s\n' "$repl_provider_toml"
                printf 'starttls = %s\n' "$repl_starttls_toml"
                [ -z "$repl_ca_toml" ] || printf 'tls_ca_file = %s\n' "$repl_ca_toml"
                printf 'bind_dn = %s\npassword_file = %s\n' "$repl_bind_dn_toml" "$repl_password_file_toml"
                printf 'search_base = %s\ntype = "refreshAndPersist"\nretry = %s\n' "$repl_base_toml" "$repl_retry_toml"
                [ -z "$repl_referral_toml" ] || printf 'update_referral = %s\n' "$repl_referral_toml"
            fi
            [ "$multi_provider" = false ] || mesh_tables
        } >"$temporary"
    )
    mv -f -- "$temporary" "$generated_config"
}

case ${1-} in
    '' | -*) ;;
    *) exec "$@" ;;
esac

user_config=${FERRODIR_CONFIG:-/etc/ferrodir/ferrodir.toml}
generated_config=${FERRODIR_GENERATED_CONFIG:-/run/ferrodir/ferrodir.toml}

if [ -f "$user_config" ]; then
    note "using $user_config as it is (FERRODIR_* settings are ignored)"
    config=$user_config
else
    write_config
    config=$generated_config
fi
# The server reads the password from the config; keep it out of the server's environment.
unset FERRODIR_ROOT_PASSWORD

if [ "${FERRODIR_CONFIG_ONLY:-0}" = 1 ]; then
    printf '%s\n' "$config"
    exit 0
fi
exec ferrodir serve --config "$config" "$@"
