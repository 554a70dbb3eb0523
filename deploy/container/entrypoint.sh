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
    server_id=${FERRODIR_SERVER_ID:-0}
    case $server_id in
        ordinal+*)
            base=$(toml_count FERRODIR_SERVER_ID "${server_id#ordinal+}")
            host=${FERRODIR_POD_NAME:-$(hostname)}
            ordinal=${host##*-}
            case $ordinal in
                '' | *[!0-9]*) die "FERRODIR_SERVER_ID=$server_id needs a hostname ending in -N, not '$host'" ;;
            esac
            server_id=$((base + ordinal))
            ;;
        *) server_id=$(toml_count FERRODIR_SERVER_ID "$server_id") ;;
    esac
    [ "$server_id" -le 4095 ] || die "FERRODIR_SERVER_ID must be at most 4095, not $server_id"

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
