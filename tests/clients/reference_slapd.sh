# shellcheck shell=bash
# Sourced by run.sh when CLIENTS_SERVER=slapd: starts OpenLDAP's slapd (Debian's slapd
# package, 2.5) set up as run.sh sets up ferrodir, so that the client checks can be run
# against a reference server: the same data, StartTLS with the same CA, the reader's limits
# as `limits ... size.soft=500 size.pr=1000 size.prtotal=unlimited`, the memberof overlay
# (posixGroup groups, member) and sssvlv for sorting. Not part of CI: a developer's check
# that what the suite asserts is what slapd does. Sets server_pid; logs to $SERVER_LOG
# (slapd -d stats, whose SEARCH RESULT lines carry nentries= as ferrodir's access log does).

start_reference_slapd() {
    local dir=$CLIENTS_WORK/slapd schema=/etc/ldap/schema
    if ! command -v slapd >/dev/null || ! command -v slapadd >/dev/null || ! command -v ldapadd >/dev/null; then
        echo "tests/clients: CLIENTS_SERVER=slapd needs slapd and ldap-utils" >&2
        return 1
    fi
    mkdir -p "$dir/db"
    cat >"$dir/slapd.conf" <<EOF
include $schema/core.schema
include $schema/cosine.schema
include $schema/inetorgperson.schema
include $schema/nis.schema
pidfile $dir/slapd.pid
argsfile $dir/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
moduleload memberof
moduleload sssvlv
moduleload ppolicy
TLSCACertificateFile $CA_FILE
TLSCertificateFile $CLIENTS_WORK/pki/server.pem
TLSCertificateKeyFile $CLIENTS_WORK/pki/server.key
sizelimit 500
database mdb
maxsize 268435456
suffix "$BASE_DN"
rootdn "cn=admin,$BASE_DN"
rootpw admin-secret
directory $dir/db
index objectClass eq
index uid,mail,cn,sn,member,memberUid,uidNumber,gidNumber,entryUUID eq
limits dn.exact="$READER_DN" size.soft=500 size.hard=500 size.pr=1000 size.prtotal=unlimited
access to attrs=userPassword by self write by anonymous auth by * none
access to * by * read
overlay memberof
memberof-group-oc posixGroup
memberof-member-ad member
memberof-memberof-ad memberOf
overlay sssvlv
overlay ppolicy
ppolicy_use_lockout
EOF
    # slapadd runs no overlays: the groups are added online, so that memberof sees them.
    awk -v RS= -v ORS='\n\n' '!/^dn: cn=[^,]*,ou=groups,/' "$CLIENTS_WORK/data.ldif" >"$dir/entries.ldif"
    awk -v RS= -v ORS='\n\n' '/^dn: cn=[^,]*,ou=groups,/' "$CLIENTS_WORK/data.ldif" >"$dir/groups.ldif"
    if ! slapadd -q -f "$dir/slapd.conf" -l "$dir/entries.ldif" >"$dir/slapadd.log" 2>&1; then
        log_tail slapadd "$dir/slapadd.log"
        return 1
    fi
    slapd -d stats -h "$LDAP_URI/" -f "$dir/slapd.conf" >"$SERVER_LOG" 2>&1 &
    # shellcheck disable=SC2034  # run.sh's, stopped by its cleanup
    server_pid=$!
    if ! wait_for 30 ldapsearch -x -H "$LDAP_URI" -b "" -s base; then
        log_tail slapd "$SERVER_LOG"
        return 1
    fi
    if ! ldapadd -x -H "$LDAP_URI" -D "cn=admin,$BASE_DN" -w admin-secret -f "$dir/groups.ldif" >"$dir/ldapadd.log" 2>&1; then
        log_tail "ldapadd (groups)" "$dir/ldapadd.log"
        return 1
    fi
    echo "slapd: $(slapd -VV 2>&1 | head -n 1)"
}
