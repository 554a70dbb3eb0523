#!/usr/bin/env bash
# nslcd (nss-pam-ldapd) against ferrodir: run by run.sh under `unshare -m`. `nslcd -d`
# with its own nslcd.conf (pagesize 100, StartTLS with the test CA, bound as the reader),
# a private /etc/nsswitch.conf (files ldap) and /run (nslcd's socket) bind-mounted over
# the host's in this mount namespace only; then getent in the same namespace, through
# libnss-ldapd. Needs: nslcd, libnss-ldapd.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/clients/lib.sh
source "$here/lib.sh"
C=nslcd

command -v nslcd >/dev/null || { fail $C "nslcd is not installed (Debian: nslcd)"; exit 1; }
[ -n "$(find /lib /usr/lib -name 'libnss_ldap.so.2' -print -quit 2>/dev/null)" ] ||
    { fail $C "the NSS module is not installed (Debian: libnss-ldapd)"; exit 1; }
id nslcd >/dev/null 2>&1 || { fail $C "there is no nslcd user (the nslcd package makes it)"; exit 1; }

ns=$CLIENTS_WORK/nslcd
mkdir -p "$ns/run/nslcd"
chown nslcd:nslcd "$ns/run/nslcd"
cat >"$ns/nslcd.conf" <<EOF
uid nslcd
gid nslcd
uri $LDAP_URI
base $BASE_DN
binddn $READER_DN
bindpw $READER_PW
ssl start_tls
tls_reqcert demand
tls_cacertfile $CA_FILE
pagesize 100
nss_nested_groups yes
EOF
chmod 600 "$ns/nslcd.conf"
cat >"$ns/nsswitch.conf" <<'EOF'
passwd:         files ldap
group:          files ldap
hosts:          files
EOF
if ! bind_private "$ns/nsswitch.conf" /etc/nsswitch.conf "$ns/nslcd.conf" /etc/nslcd.conf "$ns/run" /run; then
    fail $C "private mounts (unshare -m) could not be set up"
    exit 1
fi

log=$CLIENTS_WORK/nslcd.log
nslcd -d >"$log" 2>&1 &
nslcd_pid=$!
remember_daemon "$nslcd_pid"
# shellcheck disable=SC2317  # run by the trap
cleanup() {
    stop_pid "$nslcd_pid"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
failed=0
verdict() { # verdict OK WHAT [DETAIL...]
    local ok=$1
    shift
    if [ "$ok" = 0 ]; then pass $C "$1"; else fail $C "$@"; failed=1; fi
}

if wait_for 30 getent passwd alice; then
    line=$(getent passwd alice)
    # The password field is "*" when userPassword is not readable (it is not, to the reader).
    [ "$line" = "alice:*:9998:10000:Alice Tester:/home/alice:/bin/bash" ]
    verdict $? "getent passwd alice over StartTLS" "got: $line"
else
    verdict 1 "getent passwd alice over StartTLS" "no answer within 30 s (nslcd pid $nslcd_pid)"
fi

# All users, more than a page (100) and more than the reader's 500-entry plain-search
# limit: only a paged search returns them all.
want=$((USERS + 2))
listing=$ns/passwd
log_start=$(wc -l <"$SERVER_LOG")
timeout 120 getent passwd >"$listing" 2>&1
rc=$?
n=$(grep -c -E '^(alice|bob|user[0-9]{5}):' "$listing")
dups=$(cut -d: -f1 "$listing" | sort | uniq -d | head -5 | tr '\n' ' ')
[ "$n" -eq "$want" ] && [ -z "$dups" ]
verdict $? "getent passwd returns all $want users, each once (pagesize 100)" \
    "getent exit $rc; saw $n of $want users; duplicates: ${dups:-none}"
sleep 1 # ferrodir's access log is flushed every 200 ms
pages=$(tail -n +$((log_start + 1)) "$SERVER_LOG" | grep -c 'nentries=100 ' || true)
[ "$pages" -ge $((want / 100)) ]
verdict $? "the server's access log shows the pages of 100 (saw $pages)" \
    "saw $pages results with nentries=100 in the access log"

got=$(getent group platform)
members=$(cut -d: -f4 <<<"$got" | tr ',' '\n' | sort | paste -sd, -)
[ "$(cut -d: -f3 <<<"$got")" = 20002 ] && [ "$members" = "alice,bob,user00001" ]
verdict $? "getent group platform with nested members (nss_nested_groups)" "got: $got"
got=$(id -G -n alice 2>&1 | tr ' ' '\n' | sort | paste -sd, -)
[ "$got" = "allhands,developers,employees,platform" ]
verdict $? "id alice: employees, developers, platform, allhands" "got: $got"

if ! kill -0 "$nslcd_pid" 2>/dev/null; then
    verdict 1 "nslcd still running at the end" "it exited"
fi
if [ "$failed" -ne 0 ]; then
    log_tail "nslcd -d" "$log" 60
fi
exit "$failed"
