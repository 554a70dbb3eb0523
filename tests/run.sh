#!/usr/bin/env bash
# Runs every test of the project: unit tests of each crate and the end-to-end tests in
# tests/e2e, which drive the real binary with the ldap3 crate and OpenLDAP's tools.
# OpenLDAP's client tools (Debian package ldap-utils) are installed when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v ldapsearch >/dev/null 2>&1; then
  echo "installing ldap-utils (OpenLDAP client tools) for the end-to-end tests"
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && apt-get install -y -qq ldap-utils
  else
    sudo apt-get update -qq && sudo apt-get install -y -qq ldap-utils
  fi
fi

# The crash tests need the server's test-only switches (a cargo feature, never in a release
# binary); without it cargo would skip them silently.
cargo test --workspace --locked --features ferrodir-server/fault-injection "$@"
