# shellcheck shell=bash
# Helpers shared by the tests/deploy scripts (sourced, bash).

# Prints a TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_ready BIN ADDR PID: waits (up to 60 s) until `BIN healthcheck --addr ADDR` succeeds;
# fails early if process PID exits.
wait_ready() {
    local bin=$1 addr=$2 pid=$3
    for _ in $(seq 1 240); do
        if "$bin" healthcheck --addr "$addr" >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "the server (pid $pid) exited before it was ready" >&2
            return 1
        fi
        sleep 0.25
    done
    echo "the server at $addr was not ready after 60 s" >&2
    return 1
}

# stop_pid PID: SIGTERM, then SIGKILL after 10 s; only ever a PID this test started.
stop_pid() {
    local pid=$1
    kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# Counts checks; `finish NAME` prints the closing line and sets the exit status.
checks_passed=0
checks_failed=0
pass() {
    checks_passed=$((checks_passed + 1))
    echo "ok: $*"
}
fail() {
    checks_failed=$((checks_failed + 1))
    echo "FAIL: $*" >&2
}
finish() {
    echo "$1: $checks_passed passed, $checks_failed failed"
    [ "$checks_failed" -eq 0 ]
}
