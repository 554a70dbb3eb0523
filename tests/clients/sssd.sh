#!/usr/bin/env bash
# SSSD (sssd-ldap) against ferrodir: run by run.sh under `unshare -m`. `sssd -i` with its
# own sssd.conf (id_provider = ldap, ldap_schema = rfc2307bis, StartTLS with the test CA,
# enumerate = true, so that it pages through all users), with private /etc/sssd, /run,
# /var/log/sssd, /etc/nsswitch.conf (files sss) and /etc/pam.d (a service using pam_sss)
# bind-mounted over the host's, and a tmpfs on /var/lib/sss, in this mount namespace only. Then
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
mkdir -p "$ns/etc-sssd/conf.d" "$ns/run" "$ns/log" "$ns/pam.d"
cat >"$ns/etc-sssd/sssd.conf" <<EOF
[sssd]
services = nss, pam
domains = example

[nss]
filter_groups = root
filter_users = root
# getent passwd answers from the responder's enumeration cache (120 s by default): keep it
# short so that the loop below sees the stored enumeration grow.
enum_cache_timeout = 2
# Answering getent passwd for a thousand users can take the responder longer than its default
# watchdog (timeout = 10) allows on a slow machine.
timeout = 120

[pam]

[domain/example]
id_provider = ldap
auth_provider = ldap
chpass_provider = none
ldap_schema = rfc2307bis
ldap_uri = $LDAP_URI
ldap_search_base = $BASE_DN
# SSSD's enumeration stores every user in its cache and builds getent's answer from there:
# for 10,000 users that takes this 2-core machine minutes (its docs advise against enumerate
# on large directories). It enumerates 1,001 users instead (alice, bob, user00000-user00999):
# 11 pages of 100, and still twice the reader's 500-entry limit for a plain search.
# (And the three password-policy users of make_ldif.py, under ou=ppolicy.)
ldap_user_search_base = ou=people,$BASE_DN?subtree?(|(uid=alice)(uid=bob)(uid=user00*))?ou=ppolicy,$BASE_DN?subtree?
ldap_group_search_base = ou=groups,$BASE_DN
ldap_default_bind_dn = $READER_DN
ldap_default_authtok_type = password
ldap_default_authtok = $READER_PW
ldap_id_use_start_tls = true
ldap_tls_reqcert = demand
ldap_tls_cacert = $CA_FILE
# Enumeration is what pages: all users and groups, in pages of ldap_page_size.
enumerate = true
# SSSD delays its first enumeration by a random 0-30 s by default.
ldap_enumeration_refresh_offset = 0
# No host and network enumeration: started beside the user enumeration it would interleave
# a second paged search on the same connection, which slapd (one paged search per
# connection) answers with "paged results cookie is invalid"; ferrodir allows both.
resolver_provider = none
sudo_provider = none
autofs_provider = none
ldap_page_size = 100
ldap_enumeration_search_timeout = 120
ldap_group_nesting_level = 4
cache_credentials = false
# Storing the first enumeration (10,000 users in one sysdb transaction) keeps the back end
# busy longer than its watchdog allows by default (timeout = 10: killed after 3 missed
# heartbeats), which would take SSSD offline.
timeout = 120
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
# Any other service is denied (the host's "other" includes common-* files not here).
printf '%s required pam_deny.so\n' auth account password session >"$ns/pam.d/other"

if ! bind_private "$ns/nsswitch.conf" /etc/nsswitch.conf "$ns/run" /run "$ns/etc-sssd" /etc/sssd \
    "$ns/log" /var/log/sssd "$ns/pam.d" /etc/pam.d; then
    fail $C "private mounts (unshare -m) could not be set up"
    exit 1
fi
# The cache on a tmpfs of this namespace's own: SSSD's sysdb commits with fsync, and storing
# 10,000 users on disk takes minutes on a slow one.
if ! mount -t tmpfs -o size=512m,mode=0755 ferrodir-sss /var/lib/sss; then
    fail $C "a tmpfs over /var/lib/sss could not be mounted"
    exit 1
fi
mkdir -p /var/lib/sss/db /var/lib/sss/pipes/private /var/lib/sss/mc /var/lib/sss/pubconf \
    /var/lib/sss/gpo_cache /var/lib/sss/secrets /var/lib/sss/deskprofile /var/lib/sss/keytabs
chmod 700 /var/lib/sss/db /var/lib/sss/pipes/private /var/lib/sss/secrets

log=$CLIENTS_WORK/sssd.log
sssd -i -d 3 --logger=stderr >"$log" 2>&1 &
sssd_pid=$!
remember_daemon "$sssd_pid"
# shellcheck disable=SC2317  # run by the trap
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
if wait_for 60 timeout 10 getent passwd alice; then
    line=$(timeout 30 getent passwd alice)
    [ "$line" = "alice:*:9998:10000:Alice Tester:/home/alice:/bin/bash" ]
    verdict $? "getent passwd alice over StartTLS" "got: $line"
else
    verdict 1 "getent passwd alice over StartTLS" "no answer within 60 s (is sssd up? pid $sssd_pid)"
fi

# 2. Enumeration: every user of the search base, each once. SSSD pages when the root DSE
# advertises the paged-results control; without it the reader's 500-entry limit cuts it.
want=1001
count_users() { timeout 60 getent passwd | grep -c -E '^(alice|bob|user[0-9]{5}):'; }
# Waits for the first enumeration to be stored: until all are there, or the count has not
# moved for 20 s (an enumeration cut short stops growing), at most 90 s.
enum_started=$SECONDS
deadline=$((SECONDS + 90))
n=0
last=-1
moved=$SECONDS
while [ "$SECONDS" -lt "$deadline" ]; do
    n=$(count_users)
    [ "$n" -ge "$want" ] && break
    if [ "$n" -ne "$last" ]; then last=$n; moved=$SECONDS; fi
    [ $((SECONDS - moved)) -ge 20 ] && break
    sleep 2
done
dups=$(timeout 60 getent passwd | cut -d: -f1 | sort | uniq -d | head -5 | tr '\n' ' ')
[ "$n" -eq "$want" ] && [ -z "$dups" ]
verdict $? "getent passwd enumerates all $want users, each once (pages of 100; $((SECONDS - enum_started)) s)" \
    "saw $n of $want users after $((SECONDS - enum_started)) s; duplicates: ${dups:-none}"

# 3. Groups: nested memberships are flattened by SSSD (rfc2307bis member DNs).
members() { timeout 30 getent group "$1" | cut -d: -f4 | tr ',' '\n' | sort | paste -sd, -; }
gid_of() { timeout 30 getent group "$1" | cut -d: -f3; }
got="$(gid_of developers):$(members developers)"
[ "$got" = "20001:alice,user00001" ]
verdict $? "getent group developers: gid 20001, members alice,user00001" "got: $got"
got="$(gid_of platform):$(members platform)"
[ "$got" = "20002:alice,bob,user00001" ]
verdict $? "getent group platform: bob and the nested developers' members" "got: $got"
got="$(gid_of allhands):$(members allhands)"
[ "$got" = "20003:alice,bob,user00001" ]
verdict $? "getent group allhands: members two levels down" "got: $got"
groups_listed=$(timeout 30 getent group | cut -d: -f1 | grep -c -x -E 'employees|developers|platform|allhands')
[ "$groups_listed" -eq 4 ]
verdict $? "getent group enumerates the 4 LDAP groups" "listed $groups_listed of 4: $(timeout 30 getent group | tail -n 8 | tr '\n' ' ')"

# 4. id: the primary group and every nested group, through initgroups.
got=$(timeout 30 id -G -n alice 2>&1 | tr ' ' '\n' | sort | paste -sd, -)
[ "$got" = "allhands,developers,employees,platform" ]
verdict $? "id alice: employees, developers and (nested) platform, allhands" "got: $got ($(timeout 30 id alice 2>&1))"
got=$(timeout 30 id -G -n bob 2>&1 | tr ' ' '\n' | sort | paste -sd, -)
[ "$got" = "allhands,employees,platform" ]
verdict $? "id bob: employees, platform, allhands, not developers" "got: $got ($(timeout 30 id bob 2>&1))"

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

# 6. The password policy as PAM shows it (the Password Policy control SSSD asks for on its
# binds): the expiry warning, the forced change after a reset, the refusal of a locked
# account whatever the password.
out=$(printf '%s\n' "$USER_PW" | timeout 30 pamtester ferrodir-sssd pp-expiring authenticate 2>&1)
rc=$?
[ "$rc" -eq 0 ] && grep -q -i 'expire' <<<"$out"
verdict $? "pamtester: an expiring password authenticates, with the expiry warning" "exit $rc: $out"
out=$(printf '%s\n' "$USER_PW" | timeout 30 pamtester ferrodir-sssd pp-reset authenticate acct_mgmt 2>&1)
rc=$?
[ "$rc" -ne 0 ] && grep -q -i 'new one required\|expired\|change' <<<"$out"
verdict $? "pamtester: after a reset the password must be changed (acct_mgmt)" "exit $rc: $out"
out=$(printf '%s\n' "$USER_PW" | timeout 30 pamtester ferrodir-sssd pp-locked authenticate 2>&1)
rc=$?
# The account is known (so the refusal is the lock's, not an unknown user's).
known=$(timeout 30 getent passwd pp-locked 2>&1)
[ "$rc" -ne 0 ] && grep -q -i 'authentication failure' <<<"$out" && grep -q '^pp-locked:' <<<"$known"
verdict $? "pamtester: a locked account is refused with the right password" "exit $rc: $out; getent: $known"

if ! kill -0 "$sssd_pid" 2>/dev/null; then
    verdict 1 "sssd still running at the end" "it exited"
fi
if [ "$failed" -ne 0 ]; then
    grep -v -E 'SELinux|SELINUX' "$log" >"$log.short"
    log_tail "sssd -i (debug level 3, SELinux notices left out)" "$log.short" 60
fi
exit "$failed"
