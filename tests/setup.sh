#!/usr/bin/env bash
# Installs what the tests need on a Debian 12 machine, once: a package already installed is
# not asked for again, and with nothing missing this runs no apt-get at all (nor needs
# root). tests/run.sh calls it before its tests; .ci/run calls it with every option.
#
#   bash tests/setup.sh            # what `bash tests/run.sh` needs: unit, e2e, conformance, crash
#   bash tests/setup.sh --all      # also what `bash tests/run.sh --all` needs: clients, deploy
#   bash tests/setup.sh --bench    # also the benchmark harness's tools (ldclt, strace)
#
# The Rust toolchain (cargo, stable) is taken as installed: see rustup.rs.
set -euo pipefail

all=0
bench=0
for arg in "$@"; do
    case $arg in
        --all) all=1 ;;
        --bench) bench=1 ;;
        *) echo "tests/setup.sh: unknown option $arg (--all, --bench)" >&2; exit 2 ;;
    esac
done

# The end-to-end tests (tests/e2e):
# - OpenLDAP's client tools (ldapsearch, ldapwhoami, ldappasswd ...);
# - /usr/bin/python3 with ldap3 (Password Modify, certificate validation);
# - openssl s_client, and Cyrus SASL's PLAIN and SCRAM mechanisms (libsasl2-modules) for
#   ldapwhoami -Y PLAIN / -Y SCRAM-SHA-256 (tests/e2e/scram.rs);
# - promtool checks the metrics, a real Prometheus server scrapes them;
# - the disk-fault tests build an ext4 image on a loop device (mkfs.ext4, losetup, nsenter);
# - 389-ds-base's logconv reads the access log (389-ds's format).
# The conformance tests (tests/conformance) run slapd 2.5 and slapadd from a private config.
packages=(
    ldap-utils python3 python3-ldap3 openssl libsasl2-modules prometheus
    e2fsprogs util-linux mount slapd 389-ds-base
)
# Real clients (tests/clients), and for the deploy/ checks (tests/deploy) systemd-analyze
# and shellcheck; kubernetes-validate comes from pip below.
client_packages=(
    sssd-ldap sssd-tools pamtester nslcd libnss-ldapd default-jdk-headless ruby
    ruby-net-ldap postfix postfix-ldap
)
if [ $all = 1 ]; then packages+=("${client_packages[@]}" systemd shellcheck); fi
# bench/run.sh's smoke pass: ldclt (389-ds-base, installed above) and strace.
if [ $bench = 1 ]; then packages+=(strace); fi

missing=()
for package in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$package")
done
pip_missing=0
if [ $all = 1 ] && ! command -v kubernetes-validate >/dev/null 2>&1; then pip_missing=1; fi
if [ "${#missing[@]}" -eq 0 ] && [ $pip_missing = 0 ]; then
    exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "tests/setup.sh: missing ${missing[*]} (pip: kubernetes-validate: $pip_missing); run this as root, or install them" >&2
        exit 1
    fi
    sudo=(sudo)
fi

if [ "${#missing[@]}" -gt 0 ]; then
    echo "tests/setup.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # The conformance test runs its own slapd from a private config: the package's binaries
    # and schema files are all it needs, so skip the package's own configuration.
    if [[ " ${missing[*]} " == *" slapd "* ]]; then
        echo "slapd slapd/no_configuration boolean true" | "${sudo[@]}" debconf-set-selections
    fi
    # Only the clients' packages: their maintainer scripts add sss and ldap to
    # /etc/nsswitch.conf and pam_sss to /etc/pam.d/common-*, and would start sssd, nslcd
    # and postfix. tests/clients runs each daemon in a mount namespace of its own: here no
    # service is started and the host's NSS and PAM files are put back as they were.
    clients=0
    for package in "${client_packages[@]}"; do
        [[ " ${missing[*]} " == *" $package "* ]] && clients=1
    done
    nss_pam_backup=""
    no_services_added=""
    restore_host() {
        if [ -n "$no_services_added" ]; then "${sudo[@]}" rm -f /usr/sbin/policy-rc.d; fi
        if [ -n "$nss_pam_backup" ]; then
            "${sudo[@]}" cp -a "$nss_pam_backup/nsswitch.conf" /etc/nsswitch.conf
            "${sudo[@]}" cp -a "$nss_pam_backup/pam.d/." /etc/pam.d/
            "${sudo[@]}" rm -rf "$nss_pam_backup"
        fi
    }
    if [ $clients = 1 ]; then
        echo "postfix postfix/main_mailer_type select No configuration" | "${sudo[@]}" debconf-set-selections
        nss_pam_backup=$(mktemp -d)
        "${sudo[@]}" cp -a /etc/nsswitch.conf /etc/pam.d "$nss_pam_backup/"
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
            "${sudo[@]}" chmod 755 /usr/sbin/policy-rc.d
            no_services_added=1
        fi
        trap restore_host EXIT
    fi
    "${sudo[@]}" apt-get update
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
    restore_host
    trap - EXIT
fi

if [ $pip_missing = 1 ]; then
    # The Kubernetes manifests' offline schema check (it brings PyYAML and jsonschema).
    "${sudo[@]}" python3 -m pip install --quiet kubernetes-validate
fi
