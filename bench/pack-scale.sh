#!/usr/bin/env bash
# Prepares a self-contained folder for bench/scale.sh on a machine with no network and no
# package installs: the ferrodir release binary, the bench tools, gen-data.py, scale.sh
# with its helpers, and the .deb files of slapd, ldap-utils, 389-ds-base (ldclt) and their
# library dependencies, which scale.sh unpacks with `dpkg -x` into a private root.
#
#   bash bench/pack-scale.sh [--out DIR]     # default bench/out/scale-pack (+ DIR.tar.gz)
#   then on the big machine: tar xzf scale-pack.tar.gz && bash scale-pack/scale.sh
#
# Dependencies: `apt-cache depends --recurse` of the three packages, keeping library
# packages (lib*) only and leaving out what a running Debian system always has and what
# must not be swapped under the system loader (libc6), and the Perl/Python/systemd
# parts of 389-ds-base that ldclt does not use. ldd on the unpacked binaries then proves
# that nothing they load is missing (see scale.sh --check-pack).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/out/scale-pack
while [ $# -gt 0 ]; do
  case $1 in --out) OUT=$2; shift ;; *) echo "unknown option $1" >&2; exit 2 ;; esac
  shift
done
PACKAGES=(slapd ldap-utils 389-ds-base 389-ds-base-libs)

for i in 1 2 3 4 5; do
  cargo build --release --bin ferrodir && break
  [ $i = 5 ] && exit 1; echo "build failed, retrying in 30 s" >&2; sleep 30
done
cargo build --release -p ferrodir-bench || echo "bench tools not built: the pack will lack them" >&2

rm -rf "$OUT" && mkdir -p "$OUT/bin" "$OUT/debs" "$OUT/lib"
cp target/release/ferrodir "$OUT/bin/"
for tool in ldap-null-responder ldap-latency; do
  [ -x "target/release/$tool" ] && cp "target/release/$tool" "$OUT/bin/"
done
cp bench/gen-data.py bench/scale.sh "$OUT/"
cp bench/lib/common.sh bench/lib/util.py "$OUT/lib/"

mapfile -t LIBS < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${PACKAGES[@]}" 2>/dev/null \
  | grep -v '^ ' | grep -v '^<' | grep '^lib' | sort -u \
  | grep -Ev -- '-perl$|python|-dev$|systemd|udev|^libc6$|^libpam-|^libdebian-installer|^libnewt|^libslang|^libcrack|^libcryptsetup|^libdevmapper|^libfdisk|^libmount|^libblkid|^libkmod|^libpci|^libsensors|^libsnmp|^libapparmor|^libelogind|^libip4tc|^libseccomp')
echo "downloading ${#PACKAGES[@]} packages and ${#LIBS[@]} libraries" >&2
# apt-get download runs as _apt when it can; let it write into a folder it may write to.
chmod 777 "$OUT/debs"
(cd "$OUT/debs" && apt-get download "${PACKAGES[@]}" "${LIBS[@]}" >/dev/null)
chmod 755 "$OUT/debs"
ls "$OUT/debs" > "$OUT/debs.txt"
tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")"
echo "packed $(ls "$OUT/debs" | wc -l) .deb files, $(du -sh "$OUT" | cut -f1) in $OUT (and $OUT.tar.gz)" >&2
