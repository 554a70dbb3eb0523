#!/usr/bin/env bash
# Prepares a self-contained folder for bench/scale.sh on a machine with no network and no
# package installs: a stripped copy of the ferrodir release binary, the bench tools (also
# stripped), gen-data.py, scale.sh with its helpers, and the .deb files of slapd,
# ldap-utils, 389-ds-base (ldclt) and their library dependencies, which scale.sh unpacks
# into a private root (`dpkg -x`, or its own unpacker where dpkg is missing).
#
#   bash bench/pack-scale.sh [--out DIR] [--no-build] [--bin-dir DIR]
#       default DIR bench/out/scale-pack (+ DIR.tar.gz); --no-build takes the binaries as
#       they are in --bin-dir (default ${CARGO_TARGET_DIR:-target}/release)
#   then on the big machine: tar xzf scale-pack.tar.gz && bash scale-pack/scale.sh
#   (which runs `scale.sh --check-pack` first; run that alone to test the pack), and after
#   it the access log's cost at 8 server cores (issue #28; about 2.5 minutes):
#   bash scale-pack/accesslog.sh --cores 8 --rounds 3 --parts rate
#   and the login storm (issue #28) at 8 server cores, after scale.sh has unpacked:
#   bash scale-pack/login-storm.sh --server-cpus 0-7 --client-cpus 8-15 --shards 8 --workers 64
#   (slapd-contrib is packed for slapd's pw-pbkdf2 module; argon2 is in slapd itself)
#   and issue #28's large directories (10M entries: ~48 GB of disk, ~20 min on 16 cores):
#   bash scale-pack/large.sh --n 10000000 --shards 8 --server-cpus 0-7 --client-cpus 8-15 \
#     --client-threads 4 --connections 64
#
# Stripped: the release profile keeps debug info (about 85 MB); `objcopy --strip-debug`
# writes a copy without it into the pack (the symbol table stays, so perf still names
# functions) and leaves the build's binary alone.
#
# Dependencies: `apt-cache depends --recurse` of the packages, keeping library packages
# (lib*) only and leaving out what a running Debian system always has and what must not
# be swapped under the system loader (libc6), and the Perl/Python/systemd parts of
# 389-ds-base that ldclt does not use. The .debs must stay within DEBS_MAX_MIB (64 MiB):
# over that this script fails and makes no tarball.
#
# glibc: libc6 is not packed, so the target's glibc must be at least the highest
# GLIBC_x.y symbol version any packed binary or library needs (objdump -T over all of
# them). pack-info.txt records that version, this machine's glibc, the commit and the
# binaries' checksums; scale.sh --check-pack compares it with the target's glibc and runs
# ldd on everything it will start.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=bench/out/scale-pack; BUILD=1; BIN_DIR=${CARGO_TARGET_DIR:-target}/release
DEBS_MAX_MIB=${DEBS_MAX_MIB:-64}  # env override only to test the failure
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift ;;
    --no-build) BUILD=0 ;;
    --bin-dir) BIN_DIR=$2; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
PACKAGES=(slapd slapd-contrib ldap-utils 389-ds-base 389-ds-base-libs)
# Libraries the filter below leaves out of the dependency walk but which unpacked 389-ds
# programs and plugins link (libcrack2: its password plugins; libsystemd0: ns-slapd;
# libsnmp40 and its libraries: ldap-agent), and zlib1g: packed too, so that every packed
# ELF file finds everything but libc6 inside the pack (checked below).
EXTRA_LIBS=(libcrack2 libsystemd0 libsnmp40 libpci3 libsensors5 libwrap0 libudev1 zlib1g)
TOOLS=(ldap-null-responder ldap-latency ldap-search-load ldap-login-storm)
for tool in objcopy objdump apt-get apt-cache dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "pack-scale: $tool is needed here" >&2; exit 1; }
done

if [ $BUILD = 1 ]; then
  for i in 1 2 3 4 5; do
    cargo build --release --bin ferrodir && break
    [ $i = 5 ] && exit 1; echo "build failed, retrying in 30 s" >&2; sleep 30
  done
  cargo build --release -p ferrodir-bench || echo "bench tools not built: the pack will lack them" >&2
fi
[ -x "$BIN_DIR/ferrodir" ] || { echo "pack-scale: no $BIN_DIR/ferrodir" >&2; exit 1; }

rm -rf "$OUT" "$OUT.tar.gz" && mkdir -p "$OUT/bin" "$OUT/debs" "$OUT/lib"
# Stripped copies; the originals in $BIN_DIR keep their debug info.
strip_into() {  # binary
  objcopy --strip-debug "$1" "$OUT/bin/$(basename "$1")"
  echo "  $(basename "$1"): $(du -h "$1" | cut -f1) -> $(du -h "$OUT/bin/$(basename "$1")" | cut -f1) stripped" >&2
}
strip_into "$BIN_DIR/ferrodir"
for tool in "${TOOLS[@]}"; do
  if [ -x "$BIN_DIR/$tool" ]; then strip_into "$BIN_DIR/$tool"; else echo "  $tool missing: not packed" >&2; fi
done
# large.sh: issue #28's 10M-entry and Zipf runs (import, uniform, Zipf and cold lookups,
# RSS); it finds the programs scale.sh unpacks (see its header for the 16-core command).
cp bench/gen-data.py bench/scale.sh bench/accesslog.sh bench/login-storm.sh bench/large.sh "$OUT/"
cp bench/lib/common.sh bench/lib/util.py bench/lib/scale_report.py bench/lib/login_data.py \
  bench/lib/login_report.py "$OUT/lib/"

mapfile -t LIBS < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${PACKAGES[@]}" 2>/dev/null \
  | grep -v '^ ' | grep -v '^<' | grep '^lib' | sort -u \
  | grep -Ev -- '-perl$|python|-dev$|systemd|udev|^libc6$|^libpam-|^libdebian-installer|^libnewt|^libslang|^libcrack|^libcryptsetup|^libdevmapper|^libfdisk|^libmount|^libblkid|^libkmod|^libpci|^libsensors|^libsnmp|^libapparmor|^libelogind|^libip4tc|^libseccomp')
echo "downloading ${#PACKAGES[@]} packages and $((${#LIBS[@]} + ${#EXTRA_LIBS[@]})) libraries" >&2
# apt-get download runs as _apt when it can; let it write into a folder it may write to.
chmod 777 "$OUT/debs"
(cd "$OUT/debs" && apt-get download "${PACKAGES[@]}" "${LIBS[@]}" "${EXTRA_LIBS[@]}" >/dev/null)
chmod 755 "$OUT/debs"
ls "$OUT/debs" > "$OUT/debs.txt"

debs_bytes=$(cat "$OUT"/debs/*.deb | wc -c)
debs_mib=$(python3 -c "print(f'{$debs_bytes / 2**20:.1f}')")
if [ "$debs_bytes" -gt $((DEBS_MAX_MIB * 1024 * 1024)) ]; then
  echo "pack-scale: FAILED: the .debs take $debs_mib MiB, over the limit of $DEBS_MAX_MIB MiB" >&2
  ls -S -l "$OUT/debs" | head -8 >&2 || true
  exit 1
fi

# The glibc the pack needs: the highest GLIBC_x.y version any packed ELF file asks for.
probe=$(mktemp -d); trap 'rm -rf "$probe"' EXIT
for deb in "$OUT"/debs/*.deb; do dpkg-deb -x "$deb" "$probe"; done
elves=()
while IFS= read -r -d '' f; do
  if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ]; then elves+=("$f"); fi
done < <(find "$OUT/bin" "$probe" -type f \( -perm -u+x -o -name '*.so*' \) -print0)
glibc_required=$( (objdump -T "${elves[@]}" 2>/dev/null || true) | grep -o 'GLIBC_[0-9][0-9.]*' \
  | sed 's/GLIBC_//' | sort -uV | tail -1)
needs_most=""
for f in "${elves[@]}"; do
  if objdump -T "$f" 2>/dev/null | grep -qE "GLIBC_${glibc_required//./\\.}([^0-9.]|\$)"; then needs_most+="${f#"$probe"/} "; fi
done
# Self-contained but for libc6: ldd with the pack's library path (as scale.sh sets it) on
# every packed ELF file; whatever resolves outside the pack must belong to libc6 (which
# the target's loader provides), since the target may lack anything else this machine has.
arch=$(ls -d "$probe"/usr/lib/*-linux-gnu | head -1)
probe_ld="$arch:$probe/lib/$(basename "$arch"):$arch/dirsrv:$arch/dirsrv/plugins:$probe/usr/lib/ldap"
for f in "${elves[@]}"; do LD_LIBRARY_PATH=$probe_ld ldd "$f" 2>&1 | sed "s|^|${f#"$probe"/}: |" || true; done > "$probe/ldd.txt"
if grep -q 'not found' "$probe/ldd.txt"; then
  echo "pack-scale: FAILED: packed files need libraries the pack lacks:" >&2
  grep 'not found' "$probe/ldd.txt" | head -20 >&2; exit 1
fi
outside_owners=$(awk '$3 == "=>" && $4 ~ /^\// {print $4}' "$probe/ldd.txt" | grep -v "^$probe/" | sort -u \
  | while read -r lib; do
      # merged /usr: dpkg may know the file under either name
      { dpkg -S "$lib" 2>/dev/null || dpkg -S "$(realpath "$lib")" 2>/dev/null || echo "unknown($lib):"; } | head -1 | cut -d: -f1
    done | sort -u)
if [ "$(echo "$outside_owners" | grep -vx 'libc6' | grep -c .)" -gt 0 ]; then
  echo "pack-scale: FAILED: packed files load libraries from this machine's packages other than libc6:" >&2
  echo "$outside_owners" | grep -vx libc6 | sed 's/^/  /' >&2
  awk '$3 == "=>" && $4 ~ /^\// {print}' "$probe/ldd.txt" | grep -v "=> $probe/" | grep -v 'libc.so\|libm.so\|libresolv\|libpthread\|libdl.so\|librt.so' | head -10 >&2
  echo "add the package to EXTRA_LIBS" >&2; exit 1
fi
glibc_build=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- 2>/dev/null || commit="$commit (with uncommitted changes)"
{
  echo "packed_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit=$commit"
  echo "binaries_from=$(cd "$BIN_DIR" && pwd) (built $(date -u -r "$BIN_DIR/ferrodir" +%Y-%m-%dT%H:%M:%SZ)$([ $BUILD = 0 ] && echo ', --no-build: not rebuilt from this commit'))"
  echo "glibc_build=$glibc_build"
  echo "glibc_required=$glibc_required"
  echo "glibc_required_by=$needs_most"
  echo "system_packages_needed=$(echo "$outside_owners" | tr '\n' ' ')(everything else is in the pack)"
  echo "debs_bytes=$debs_bytes"
  echo "debs_max_mib=$DEBS_MAX_MIB"
  echo "build_machine=$(uname -srm); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  (cd "$OUT/bin" && sha256sum -- *) | sed 's/^/sha256=/'
} > "$OUT/pack-info.txt"

tar -C "$(dirname "$OUT")" -czf "$OUT.tar.gz" "$(basename "$OUT")"
echo "packed $(ls "$OUT/debs" | wc -l) .deb files: $debs_mib MiB (limit $DEBS_MAX_MIB MiB); glibc needed >= $glibc_required (this machine: $glibc_build)" >&2
echo "pack folder $(du -sh "$OUT" | cut -f1), tarball $(du -h "$OUT.tar.gz" | cut -f1): $OUT.tar.gz" >&2
echo "test it: bash $OUT/scale.sh --check-pack" >&2
