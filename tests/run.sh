#!/usr/bin/env bash
# Runs the project's tests. First installs what they need (tests/setup.sh: Debian packages,
# once; root or sudo only when something is missing).
#
#   bash tests/run.sh [CARGO TEST ARGS...]   # unit tests of every crate, tests/e2e,
#                                            # tests/conformance (against slapd 2.5), tests/crash
#   bash tests/run.sh --all                  # the same, then the slow suites below (as root)
#   bash tests/run.sh --slow                 # the slow suites only (as root)
#
# The slow suites run against the binary users get, a release build without the test-only
# `fault-injection` feature: that it refuses a [testing] table (tests/release.sh), the
# real clients (tests/clients/run.sh), deploy/ (tests/deploy/run.sh) and the systemd unit
# (tests/deploy/systemd.sh). They need root (mount namespaces, daemons, /usr/local/bin).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo_suites=1
slow_suites=0
case ${1:-} in
    --all) slow_suites=1; shift ;;
    --slow) cargo_suites=0; slow_suites=1; shift ;;
esac

if [ $slow_suites = 1 ]; then bash tests/setup.sh --all; else bash tests/setup.sh; fi

if [ $cargo_suites = 1 ]; then
    # The crash tests need the server's test-only switches (a cargo feature, never in a
    # release binary); without it cargo would skip them silently.
    cargo test --workspace --locked --features ferrodir-server/fault-injection "$@"
fi

if [ $slow_suites = 1 ]; then
    # The same command as bench/run.sh's, so that the benchmark finds this build done.
    cargo build --release --locked --bin ferrodir
    release_bin=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release/ferrodir
    status=0
    for suite in tests/release.sh tests/clients/run.sh tests/deploy/run.sh tests/deploy/systemd.sh; do
        echo "== $suite (FERRODIR_BIN=$release_bin)"
        FERRODIR_BIN=$release_bin bash "$suite" || { echo "FAILED: $suite" >&2; status=1; }
    done
    exit $status
fi
