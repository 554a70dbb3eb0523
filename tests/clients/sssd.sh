#!/usr/bin/env bash
# SSSD (sssd-ldap) against ferrodir: run by run.sh under `unshare -m`. `sssd -i` with its
# own sssd.conf (id_provider = ldap, ldap_schema = rfc2307bis, StartTLS with the test CA,
# enumerate = true, so that it pages through all users), with private /etc/sssd,
# /var/lib/sss, /run, /var/log/sssd, /etc/nsswitch.conf (files sss) and /etc/pam.d (a
# service using pam_sss) bind-mounted over the host's in this mount namespace only. Then
# getent, id and pamtester, in the same namespace. Needs: sssd, sssd-ldap, pamtester.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/clients/lib.sh
source "$here/lib.sh"
C=sssd

for tool in sssd pamtester getent id; do
    command -v "$tool" >/dev/null || { fail $C "$tool is not installed (Debian: sssd-ldap, sssd-tools, pamtester)"; exit 1; }
done
[ -f /usr/lib/x86_64-linux-gnu/sssd/libsss_ldap.so ] || [ -n "$(find /usr/lib -name libsss_ldap.so -print -quit 2>/dev/null)" ] ||
    { fail $C "SSSD's LDAP provider is not installed (Debian: sssd-ldap)"; exit 1; }

ns=$CLIENTS_WORK/sssd
mkdir -p "$ns/etc-sssd/conf.d" "$ns/run" "$ns/log" "$ns/pam.d" \
    "$ns/lib-sss/db" "$ns/lib-sss/pipes/private" "$ns/lib-sss/mc" "$ns/lib-sss/pubconf" \
    "$ns/lib-sss/gpo_cache" "$ns/lib-sss/secrets" "$ns/lib-sss/deskprofile" "$ns/lib-sss/keytabs"
chmod 700 "$ns/lib-sss/db" "$ns/lib-sss/pipes/private" "$ns/lib-sss/secrets"
cat >"$ns/etc-sssd/sssd.conf" <<EOF
[sssd]
services = nss, pam
domains = example

[nss]
filter_groups = root
filter_users = root

[pam]

[domain/example]
id_provider = ldap
auth_provider = ldap
chpass_provider = none
ldap_schema = rfc2307bis
ldap_uri = $LDAP_URI
ldap_search_base = $BASE_DN
ldap_default_bind_dn = $READER_DN
ldap_default_authtok_type = password
ldap_default_authtok = $READER_PW
ldap_id_use_start_tls = true
ldap_tls_reqcert = demand
ldap_tls_cacert = $CA_FILE
# Enumeration is what pages: all users and groups, in pages of ldap_page_size.
enumerate = true
ldap_page_size = 1000
ldap_enumeration_search_timeout = 120
ldap_group_nesting_level = 4
cache_credentials = false
EOF
chmod 600 "$ns/etc-sssd/sssd.conf"
cat >"$ns/nsswitch.conf" <<'EOF'
passwd:         files sss
group:          files sss
shadow:         files sss
hosts:          files
EOF
cat >"$ns/pam.d/ferrodir-sssd" <<'EOF'
auth     required  pam_sss.so
account  required  pam_sss.so
EOF
cp /etc/pam.d/other "$ns/pam.d/other" 2>/dev/null || printf 'auth required pam_deny.so\naccount required pam_deny.so\n' >"$ns/pam.d/other"

if ! bind_private "$ns/nsswitch.conf" /etc/nsswitch.conf "$ns/run" /run "$ns/etc-sssd" /etc/sssd \
    "$ns/lib-sss" /var/lib/sss "$ns/log" /var/log/sssd "$ns/pam.d" /etc/pam.d; then
    fail $C "private mounts (unshare -m) could not be set up"
    exit 1
fi

log=$CLIENTS_WORK/sssd.log
sssd -i -d 3 --logger=stderr >"$log" 2>&1 &
sssd_pid=$!
cleanup() {
    stop_pid "$sssd_pid"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
failed=0
verdict() { # verdict OK WHAT [DETAIL...]
    local ok=$1
    shift
    if [ "$ok" = 0 ]; then pass $C "$1"; else fail $C "$@"; failed=1; fi
}

# 1. The user lookup (getpwnam): proves StartTLS, the service bind and the schema mapping.
if wait_for 60 getent passwd alice; then
    line=$(getent passwd alice)
    [ "$line" = "alice:*:9998:10000:Alice Tester:/home/alice:/bin/bash" ]
    verdict $? "getent passwd alice over StartTLS" "got: $line"
else
    verdict 1 "getent passwd alice over StartTLS" "no answer within 60 s (is sssd up? pid $sssd_pid)"
fi

# 2. Enumeration: every user, each once. SSSD pages when the root DSE advertises the
# paged-results control; without it the reader's 500-entry limit cuts the enumeration.
want=$((USERS + 2))
count_users() { getent passwd | grep -c -E '^(alice|bob|user[0-9]{5}):'; }
deadline=$((SECONDS + 150))
n=0
while [ "$SECONDS" -lt "$deadline" ]; do
    n=$(count_users)
    [ "$n" -ge "$want" ] && break
    sleep 2
done
dups=$(getent passwd | cut -d: -f1 | sort | uniq -d | head -5 | tr '\n' ' ')
[ "$n" -eq "$want" ] && [ -z "$dups" ]
verdict $? "getent passwd enumerates all $want users, each once (paged, ldap_page_size 1000)" \
    "saw $n of $want users after enumeration; duplicates: ${dups:-none}"

# 3. Groups: nested memberships are flattened by SSSD (rfc2307bis member DNs).
members() { getent group "$1" | cut -d: -f4 | tr ',' '\n' | sort | paste -sd, -; }
gid_of() { getent group "$1" | cut -d: -f3; }
got="$(gid_of developers):$(members developers)"
[ "$got" = "20001:alice,user00001" ]
verdict $? "getent group developers: gid 20001, members alice,user00001" "got: $got"
got="$(gid_of staff):$(members staff)"
[ "$got" = "20002:alice,bob,user00001" ]
verdict $? "getent group staff: bob and the nested developers' members" "got: $got"
got="$(gid_of all-staff):$(members all-staff)"
[ "$got" = "20003:alice,bob,user00001" ]
verdict $? "getent group all-staff: members two levels down" "got: $got"
groups_listed=$(getent group | cut -d: -f1 | grep -c -x -E 'employees|developers|staff|all-staff')
[ "$groups_listed" -eq 4 ]
verdict $? "getent group enumerates the 4 LDAP groups" "listed $groups_listed of 4: $(getent group | tail -n 8 | tr '\n' ' ')"

# 4. id: the primary group and every nested group, through initgroups.
got=$(id -G -n alice 2>&1 | tr ' ' '\n' | sort | paste -sd, -)
[ "$got" = "all-staff,developers,employees,staff" ]
verdict $? "id alice: employees, developers and (nested) staff, all-staff" "got: $got ($(id alice 2>&1))"
got=$(id -G -n bob 2>&1 | tr ' ' '\n' | sort | paste -sd, -)
[ "$got" = "all-staff,employees,staff" ]
verdict $? "id bob: employees, staff, all-staff, not developers" "got: $got ($(id bob 2>&1))"
got=$(id -u user09999 2>&1)
[ "$got" = "19999" ]
verdict $? "id -u user09999 (a user found by name, not from the enumeration cache)" "got: $got"

# 5. PAM through pam_sss: a bind as the user, over StartTLS.
out=$(printf '%s\n' "$USER_PW" | timeout 30 pamtester ferrodir-sssd alice authenticate 2>&1)
rc=$?
[ "$rc" -eq 0 ]
verdict $? "pamtester authenticates alice with the right password" "exit $rc: $out"
out=$(printf '%s\n' "not-the-password" | timeout 30 pamtester ferrodir-sssd alice authenticate 2>&1)
rc=$?
[ "$rc" -ne 0 ] && grep -q -i 'authentication failure\|Authentication failure' <<<"$out"
verdict $? "pamtester refuses alice with a wrong password" "exit $rc: $out"
out=$(printf '%s\n' "$USER_PW" | timeout 30 pamtester ferrodir-sssd alice authenticate acct_mgmt 2>&1)
rc=$?
[ "$rc" -eq 0 ]
verdict $? "pamtester acct_mgmt for alice" "exit $rc: $out"

if ! kill -0 "$sssd_pid" 2>/dev/null; then
    verdict 1 "sssd still running at the end" "it exited"
fi
if [ "$failed" -ne 0 ]; then
    log_tail "sssd -i (debug level 3)" "$log" 60
fi
exit "$failed"
