#!/usr/bin/env bash
# Runs every fuzz target for a bounded time and fails on the first crash of any of them.
#   usage: bash fuzz/run.sh [seconds per target, default 60] [target ...]
# Installs cargo-fuzz if it is missing, seeds the corpora (seed.sh), then runs each target on
# the stable toolchain: RUSTC_BOOTSTRAP=1 lets stable take the -Z flags cargo-fuzz passes,
# and --sanitizer none because AddressSanitizer needs a nightly standard library (the
# proto crate has no unsafe code; libFuzzer's coverage guidance is what we need). Debug
# assertions (-a) are on, so integer overflow panics like it does in the tests.
# On a crash it prints the input's path and the command that reproduces it, and exits 1.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
shift || true
case "$seconds" in '' | *[!0-9]*)
    echo "run.sh: seconds must be a whole number, got '$seconds'" >&2
    exit 2
    ;;
esac

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
bash seed.sh

export RUSTC_BOOTSTRAP=1
fuzz_flags=(--sanitizer none -a)
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
cargo fuzz build "${fuzz_flags[@]}"

failed=()
for target in "${targets[@]}"; do
    echo "run.sh: fuzzing $target for ${seconds}s"
    mkdir -p "artifacts/$target"
    before=$(find "artifacts/$target" -type f | sort)
    # -timeout: one input taking 10 s is a bug (a hang); -rss_limit_mb: so is 2 GiB.
    if ! cargo fuzz run "${fuzz_flags[@]}" "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        2>"artifacts/$target.log"; then
        failed+=("$target")
        tail -n 40 "artifacts/$target.log" >&2
        after=$(find "artifacts/$target" -type f | sort)
        for input in $(comm -13 <(echo "$before") <(echo "$after")); do
            echo "run.sh: $target crashed on $PWD/$input" >&2
            echo "run.sh:   reproduce: (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run ${fuzz_flags[*]} $target $input)" >&2
        done
    else
        grep -E '^(stat::number_of_executed_units|Done)' "artifacts/$target.log" || true
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "run.sh: crashes in: ${failed[*]}" >&2
    exit 1
fi
echo "run.sh: ${#targets[@]} targets, ${seconds}s each, no crash"
