#!/usr/bin/env bash
# Runs the crash test for any number of kill cycles.
#   bash tests/crash/soak.sh [CYCLES] [TEST]
# TEST is redb_survives_power_cuts (default) or sled_survives_kill_9. Set
# FERRODIR_CRASH_SEED to repeat a run; the seed is printed either way.
set -euo pipefail
cycles="${1:-500}"
test_name="${2:-redb_survives_power_cuts}"
cd "$(dirname "$0")/../.."
FERRODIR_CRASH_CYCLES="$cycles" cargo test --release -p ferrodir-server --features fault-injection --test crash "$test_name" -- --exact --nocapture
