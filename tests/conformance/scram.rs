//! SASL SCRAM against slapd 2.5 with Cyrus SASL 2.1.28 (its scram plugin reads the entry's
//! userPassword through slapd's auxprop): both loaded with the same people, both mapping
//! `uid=NAME,cn=scram-sha-NNN,cn=auth` to `uid=NAME,ou=people,...` by authz-regexp, then
//! the same binds by OpenLDAP's `ldapwhoami -Y SCRAM-...` and the same raw SCRAM messages
//! (python ldap3, our own bytes) on both, compared by result code and Who am I? answer.
//!
//! Known differences, asserted rather than compared (docs/CONFORMANCE.md, "SASL SCRAM"): a
//! user that doesn't exist gets other (80) from slapd at the first step, invalidCredentials
//! (49) from ferrodir after a whole exchange (RFC 5802 §9: no user enumeration); a
//! `dn:` authcid is refused by slapd (80) and taken by ferrodir, as its PLAIN takes it.

use std::process::Command;

use crate::servers::{self, Server, SUFFIX};

const PEOPLE: &str = "ou=people,dc=example,dc=com";

const LDIF: &str = "dn: dc=example,dc=com
objectClass: dcObject
objectClass: organization
o: example
dc: example

dn: ou=people,dc=example,dc=com
objectClass: organizationalUnit
ou: people

dn: uid=bob,ou=people,dc=example,dc=com
objectClass: inetOrgPerson
uid: bob
cn: bob
sn: bob
userPassword: password

dn: uid=alice,ou=people,dc=example,dc=com
objectClass: inetOrgPerson
uid: alice
cn: alice
sn: alice
userPassword: {SSHA}BR/KHTJntX6b1QS9f4p82h+54HEwMTIz
";

fn whoami(server: &Server, mechanism: &str, user: &str, password: &str) -> (i32, String) {
    let url = format!("ldap://{}", server.addr);
    let output = Command::new("ldapwhoami")
        .args(["-N", "-Q", "-Y", mechanism, "-H", &url, "-U", user, "-w", password])
        .output()
        .expect("run ldapwhoami (ldap-utils)");
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Each raw client-first message on a new connection: the code of the first answer that
/// is not saslBindInProgress, after a made-up client-final when the first step goes on
/// (slapd checks some things only there). One line per message.
const PROBE: &str = r#"
import sys
from ldap3 import Server, Connection
from ldap3.protocol.sasl.sasl import send_sasl_negotiation
port = int(sys.argv[1])
def run(mech, payload):
    c = Connection(Server("127.0.0.1", port=port)); c.open()
    c.sasl_mechanism = mech
    r = send_sasl_negotiation(c, None, payload)
    first = (r["result"], r.get("saslCreds") or b"")
    if r["result"] == 14 and first[1]:
        r = send_sasl_negotiation(c, None, b"c=biws,r=made-up,p=AAAA")
    return first[0] if first == (14, b"") else r["result"]
for payload in [b"", b"n,,", b"x,,n=bob,r=a", b"n,,n=bob=ZZ,r=a", b"n,,m=x,n=bob,r=a", b"n,,n=bob",
                b"n,,n=bob,r=a\x01", b"p=tls-unique,,n=bob,r=a", b"n,,n=bob,r=abc"]:
    print(repr(payload), run("SCRAM-SHA-256", payload))
"#;

fn probe(server: &Server) -> String {
    let output = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(PROBE)
        .arg(server.addr.port().to_string())
        .output()
        .expect("run /usr/bin/python3");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn scram_binds_answer_as_slapd_with_cyrus_sasl() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ldif = dir.path().join("people.ldif");
    std::fs::write(&ldif, LDIF).expect("write LDIF");
    let slapd = servers::start_slapd_with_globals(
        &ldif,
        &format!(
            "authz-regexp \"uid=([^,]*),(cn=[^,]*,)?cn=scram-sha-(256|512),cn=auth\" \"uid=$1,{PEOPLE}\"\n"
        ),
    );
    let ferrodir = servers::start_ferrodir_with(
        Some(&ldif),
        &format!(
            "[[authz_regexp]]\nmatch = 'uid=([^,]*),cn=scram-sha-(256|512),cn=auth'\nreplace = \"uid=$1,{PEOPLE}\"\n"
        ),
    );
    assert!(SUFFIX.ends_with("dc=example,dc=com"));
    let binds = [
        ("SCRAM-SHA-256", "bob", "password"),
        ("SCRAM-SHA-512", "bob", "password"),
        ("SCRAM-SHA-256", "bob", "wrong"),
        ("SCRAM-SHA-512", "bob", "wrong"),
        // {SSHA}: no SCRAM secret in either.
        ("SCRAM-SHA-256", "alice", "password"),
    ];
    for (mechanism, user, password) in binds {
        let reference = whoami(&slapd, mechanism, user, password);
        let ours = whoami(&ferrodir, mechanism, user, password);
        assert_eq!(ours, reference, "{mechanism} as {user} with {password:?}: ferrodir vs slapd");
    }
    assert_eq!(whoami(&slapd, "SCRAM-SHA-256", "bob", "password").0, 0, "the reference must bind");
    let (slapd_probe, ferrodir_probe) = (probe(&slapd), probe(&ferrodir));
    assert_eq!(ferrodir_probe, slapd_probe, "raw SCRAM messages: ferrodir vs slapd");
    // The known differences.
    assert_eq!(whoami(&slapd, "SCRAM-SHA-256", "nobody", "password").0, 80);
    assert_eq!(whoami(&ferrodir, "SCRAM-SHA-256", "nobody", "password").0, 49);
    let dn_form = format!("dn:uid=bob,{PEOPLE}");
    assert_eq!(whoami(&slapd, "SCRAM-SHA-256", &dn_form, "password").0, 80);
    assert_eq!(whoami(&ferrodir, "SCRAM-SHA-256", &dn_form, "password").0, 0);
}
