# shellcheck shell=bash
# Helpers shared by the tests/clients scripts (sourced, bash). run.sh exports what the
# client scripts need about the server:
#   CLIENTS_WORK     the run's temporary directory (world-readable: nslcd reads the CA
#                    after dropping to its own user)
#   LDAP_PORT        ferrodir's LDAP port on 127.0.0.1 (StartTLS offered)
#   LDAP_URI         ldap://127.0.0.1:$LDAP_PORT
#   CA_FILE          the throwaway CA that signed the server certificate (PEM)
#   BASE_DN          dc=example,dc=com
#   READER_DN/READER_PW  the service account the clients bind as
#   USER_PW          alice's and bob's password
#   USERS            how many userNNNNN entries there are (plus alice and bob)
#   SERVER_LOG       ferrodir's log (its access log goes there too)

# pass CLIENT WHAT / fail CLIENT WHAT [DETAIL...]: one line per check, on stdout; run.sh
# counts the lines that start with PASS and FAIL. A failure's details go right below it.
pass() {
    echo "PASS $1: $2"
}
fail() {
    echo "FAIL $1: $2"
    shift 2
    local line
    for line in "$@"; do
        printf '    %s\n' "$line"
    done
}

# check CLIENT WHAT COMMAND...: runs COMMAND; PASS when it exits 0, else FAIL with the last
# 20 lines of its output.
check() {
    local client=$1 what=$2 output
    shift 2
    if output=$("$@" 2>&1); then
        pass "$client" "$what"
    else
        local rc=$?
        mapfile -t tail_lines < <(printf '%s\n' "$output" | tail -n 20)
        fail "$client" "$what" "exit $rc; last lines:" "${tail_lines[@]}"
    fi
}

# Prints a TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for SECONDS COMMAND...: retries COMMAND every 0.25 s until it succeeds or SECONDS
# pass (returns 1).
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    while ! "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.25
    done
}

# stop_pid PID: SIGTERM, then SIGKILL after 10 s; only ever a PID these scripts started.
stop_pid() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# remember_daemon PID: notes a daemon a client script started, so that run.sh stops it even
# when the script itself was killed at its time limit (its own trap never ran).
remember_daemon() {
    echo "$1 $(cat "/proc/$1/comm" 2>/dev/null)" >>"$CLIENTS_WORK/daemons"
}

# stop_remembered_daemons: stops each remembered PID still running the same program.
stop_remembered_daemons() {
    local pid comm
    [ -f "$CLIENTS_WORK/daemons" ] || return 0
    while read -r pid comm; do
        if [ -n "$comm" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ]; then
            echo "stopping $comm (pid $pid), left running by its client script"
            stop_pid "$pid"
        fi
    done <"$CLIENTS_WORK/daemons"
    : >"$CLIENTS_WORK/daemons"
}

# log_tail NAME FILE [LINES]: prints the end of a daemon's log, for the CI log.
log_tail() {
    local name=$1 file=$2 lines=${3:-40}
    echo "---- last $lines lines of $name ($file) ----"
    if [ -f "$file" ]; then
        tail -n "$lines" "$file"
    else
        echo "(no log)"
    fi
    echo "---- end of $name ----"
}

# bind_private SRC DST [SRC DST...]: for a script run under `unshare -m`, bind-mounts
# each SRC over DST in that private mount namespace, so that the daemon and the commands
# run beside it see their own /etc/nsswitch.conf, /run, /etc/pam.d ... while the host's
# stay untouched. Mounts are made private first: nothing propagates back to the host.
bind_private() {
    mount --make-rprivate / || return 1
    while [ "$#" -ge 2 ]; do
        [ -e "$2" ] || { echo "bind_private: $2 does not exist" >&2; return 1; }
        mount --bind "$1" "$2" || return 1
        shift 2
    done
}
