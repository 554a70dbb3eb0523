#!/usr/bin/env bash
# Lints the library crates (proto, shard, router) with every target, tests and benches
# included. Their lib.rs files forbid unsafe code and deny unwrap/expect/panic/indexing
# outside tests; -D warnings keeps the rest of clippy's default set clean too.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo clippy -p ferrodir-proto -p ferrodir-shard -p ferrodir-router --all-targets --locked -- -D warnings
