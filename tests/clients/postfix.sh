#!/usr/bin/env bash
# postfix's LDAP tables (Debian: postfix, postfix-ldap) against ferrodir: `postmap -q`
# with ldap: tables (version = 3, StartTLS with the test CA, bound as the reader), from a
# config directory of its own (postmap -c); no postfix service runs. Run by run.sh.
# - the address lookup a virtual mailbox map does: (mail=%s) -> uid;
# - a group alias: the group by cn=%u, its member DNs followed (special_result_attribute,
#   recursively: platform holds the group developers) to each member's mail.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/clients/lib.sh
source "$here/lib.sh"
C=postfix
command -v postmap >/dev/null || { fail $C "postmap is not installed (Debian: postfix)"; exit 1; }

dir=$CLIENTS_WORK/postfix
mkdir -p "$dir"
printf 'compatibility_level = 3.6\nmaillog_file_prefixes = /dev/stderr\nmaillog_file = /dev/stderr\n' >"$dir/main.cf"
postconf -c "$dir" -m 2>/dev/null | grep -q -x ldap || { fail $C "postfix has no ldap table type (Debian: postfix-ldap)"; exit 1; }
common="server_host = $LDAP_URI
version = 3
start_tls = yes
tls_require_cert = yes
tls_ca_cert_file = $CA_FILE
bind = yes
bind_dn = $READER_DN
bind_pw = $READER_PW
timeout = 20"
printf '%s\nsearch_base = ou=people,%s\nquery_filter = (mail=%%s)\nresult_attribute = uid\n' \
    "$common" "$BASE_DN" >"$dir/mailbox.cf"
printf '%s\nsearch_base = ou=groups,%s\nquery_filter = (&(objectClass=posixGroup)(cn=%%u))\nspecial_result_attribute = member\nresult_attribute = mail\n' \
    "$common" "$BASE_DN" >"$dir/groups.cf"
chmod 600 "$dir/mailbox.cf" "$dir/groups.cf"
failed=0
verdict() { # verdict OK WHAT [DETAIL...]
    local ok=$1
    shift
    if [ "$ok" = 0 ]; then pass $C "$1"; else fail $C "$@"; failed=1; fi
}
q() { timeout 60 postmap -c "$dir" -q "$1" "ldap:$dir/$2" 2>"$dir/stderr"; }
err() { tail -n 5 "$dir/stderr"; }

got=$(q alice@example.com mailbox.cf)
rc=$?
[ "$rc" -eq 0 ] && [ "$got" = alice ]
verdict $? "postmap -q alice@example.com (mail=%s -> uid) over StartTLS" "exit $rc, got '$got'" "$(err)"
got=$(q user09999@example.com mailbox.cf)
rc=$?
[ "$rc" -eq 0 ] && [ "$got" = user09999 ]
verdict $? "postmap -q user09999@example.com" "exit $rc, got '$got'" "$(err)"
got=$(q nobody@example.com mailbox.cf)
rc=$?
[ "$rc" -eq 1 ] && [ -z "$got" ] && ! grep -q -E 'fatal|error|warning' "$dir/stderr"
verdict $? "postmap -q nobody@example.com: not found (exit 1), no error" "exit $rc, got '$got'" "$(err)"
got=$(q developers@example.com groups.cf | tr ',' '\n' | sort | paste -sd, -)
[ "$got" = "alice@example.com,user00001@example.com" ]
verdict $? "a group alias: developers' member DNs followed to their mail" "got '$got'" "$(err)"
got=$(q platform@example.com groups.cf | tr ',' '\n' | sort | paste -sd, -)
[ "$got" = "alice@example.com,bob@example.com,user00001@example.com" ]
verdict $? "a nested group alias: platform's members and developers' members" "got '$got'" "$(err)"
exit "$failed"
