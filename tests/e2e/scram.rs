//! SASL SCRAM (RFC 5802, RFC 7677) against the real binary, driven by three clients that
//! share no code with the server: OpenLDAP's `ldapwhoami -Y SCRAM-SHA-256` through Cyrus
//! SASL's scram plugin (libsasl2-modules), a SCRAM client written here in python
//! (hashlib/hmac; it checks the server's signature too), and one written here in Rust over
//! rustls for RFC 9266's `tls-exporter`, which neither of the others can compute.
//!
//! Covered: a right password binds and Who am I? answers the mapped DN, a wrong one gets 49
//! (with `e=invalid-proof`), SHA-512 too, the rootDN, a user that doesn't exist, a value
//! hashed in another scheme, a `{SCRAM-SHA-256}` value written by Password Modify (checked
//! by simple bind and by SCRAM), malformed messages, an exchange dropped by another request,
//! and under TLS the -PLUS mechanisms with `tls-server-end-point` (OpenLDAP's `ldap` form
//! from Cyrus, and RFC 5929's from python) and `tls-exporter` (TLS 1.3; refused under 1.2),
//! a wrong binding, and the "y" downgrade; lockout by the password policy after SCRAM
//! failures; `require_tls_for_binds` leaving SCRAM alone.

use std::net::SocketAddr;
use std::process::Command;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha512};

use crate::harness::free_port;
use crate::harness::{tool_with_env, Server, ADMIN_DN};
use crate::raw::{parse_result, read_message, send};
use crate::tls::{sasl_bind, tcp, tls_over, Pki};

const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";

/// Stores new passwords as SCRAM keys, and maps SCRAM user names to the people's entries.
/// `extra` may end inside a table (`[tls]`, `[testing]`): `[[authz_regexp]]` follows it.
fn config(extra: &str) -> String {
    format!(
        r#"shards = 2
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
password_scheme = "{{SCRAM-SHA-256}}"
{extra}
[[authz_regexp]]
match = 'uid=([^,]+),cn=scram-sha-(256|512)(-plus)?,cn=auth'
replace = "uid=$1,ou=people,dc=example,dc=com"
[log]
level = "warn"
"#
    )
}

/// The SCRAM client of the python checks: `scram(conn, mech, user, password, ...)` returns
/// the bind's result code and the server's last message, after checking `v=`.
const PYTHON_CLIENT: &str = r#"
import base64, hashlib, hmac, os, ssl, sys
from ldap3 import Server, Connection, Tls
from ldap3.protocol.sasl.sasl import send_sasl_negotiation

def as_bytes(value):
    if value is None:
        return None
    return value if isinstance(value, bytes) else value.encode()

def step(conn, mech, payload):
    conn.sasl_mechanism = mech
    r = send_sasl_negotiation(conn, None, payload)
    return r['result'], as_bytes(r.get('saslCreds'))

def sasl_name(user):
    return user.replace('=', '=3D').replace(',', '=2C').encode()

def scram(conn, mech, user, password, gs2=None, cb_data=b'', interpose=None, no_initial=False):
    h = hashlib.sha512 if '512' in mech else hashlib.sha256
    if gs2 is None:
        gs2 = b'n,,'
    if no_initial:
        # RFC 4422 sec. 5: no initial response; the server's challenge is empty.
        code, challenge = step(conn, mech, None)
        assert (code, challenge or b'') == (14, b''), (code, challenge)
    cnonce = base64.b64encode(os.urandom(18))
    bare = b'n=' + sasl_name(user) + b',r=' + cnonce
    code, first = step(conn, mech, gs2 + bare)
    if code != 14:
        return code, first
    fields = dict(f.split(b'=', 1) for f in first.split(b','))
    nonce, salt, iterations = fields[b'r'], base64.b64decode(fields[b's']), int(fields[b'i'])
    assert nonce.startswith(cnonce) and len(nonce) > len(cnonce), first
    if interpose:
        interpose()
    salted = hashlib.pbkdf2_hmac(h().name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b'Client Key', h).digest()
    stored_key = h(client_key).digest()
    without_proof = b'c=' + base64.b64encode(gs2 + cb_data) + b',r=' + nonce
    auth_message = bare + b',' + first + b',' + without_proof
    signature = hmac.new(stored_key, auth_message, h).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    code, last = step(conn, mech, without_proof + b',p=' + base64.b64encode(proof))
    if code == 0:
        server_key = hmac.new(salted, b'Server Key', h).digest()
        expected = b'v=' + base64.b64encode(hmac.new(server_key, auth_message, h).digest())
        assert last == expected, (last, expected)
    return code, last

def salt_of(conn, mech, user):
    code, first = step(conn, mech, b'n,,n=' + sasl_name(user) + b',r=abcdef')
    assert code == 14, (code, first)
    whoami(conn)  # any other request ends the exchange
    return dict(f.split(b'=', 1) for f in first.split(b','))[b's']

def whoami(conn):
    return conn.extend.standard.who_am_i()
"#;

fn python(script: &str) -> String {
    let output = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(format!("{PYTHON_CLIENT}\n{script}"))
        .output()
        .expect("run /usr/bin/python3");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "python failed: {text}\n{}", String::from_utf8_lossy(&output.stderr));
    text
}

fn cyrus(
    env: &[(&str, &str)],
    url: &str,
    mechanism: &str,
    user: &str,
    password: &str,
) -> (i32, String, String) {
    let args = ["-N", "-Q", "-Y", mechanism, "-H", url, "-U", user, "-w", password];
    tool_with_env("ldapwhoami", &args, None, env)
}

fn cyrus_has_scram() {
    let plugin = std::path::Path::new("/usr/lib/x86_64-linux-gnu/sasl2/libscram.so.2");
    assert!(
        plugin.exists(),
        "Cyrus SASL's SCRAM plugin is missing: apt-get install -y libsasl2-modules (tests/setup.sh)"
    );
}

#[test]
fn scram_binds_through_cyrus_sasl_and_python_without_tls() {
    cyrus_has_scram();
    let server = Server::start_with_config(&config(""));
    let url = server.url();
    // Listed, without -PLUS: there is no channel to bind to.
    let (code, out, err) = tool_with_env(
        "ldapsearch",
        &["-x", "-LLL", "-H", &url, "-b", "", "-s", "base", "supportedSASLMechanisms"],
        None,
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("supportedSASLMechanisms: SCRAM-SHA-256\n"), "{out}");
    assert!(out.contains("supportedSASLMechanisms: SCRAM-SHA-512\n"), "{out}");
    assert!(!out.contains("PLUS"), "{out}");

    // Cyrus SASL: bob's userPassword is cleartext, so his keys are derived on the fly.
    let (code, out, err) = cyrus(&[], &url, "SCRAM-SHA-256", "bob", "password");
    assert_eq!((code, out.trim()), (0, format!("dn:{BOB}").as_str()), "{err}");
    let (code, out, err) = cyrus(&[], &url, "SCRAM-SHA-512", "bob", "password");
    assert_eq!((code, out.trim()), (0, format!("dn:{BOB}").as_str()), "{err}");
    let (code, _, err) = cyrus(&[], &url, "SCRAM-SHA-256", "bob", "wrong");
    assert_eq!(code, 49, "a wrong password: {err}");
    // alice's value is {SSHA}: SCRAM cannot use it (as slapd with Cyrus), a simple bind can.
    let (code, _, err) = cyrus(&[], &url, "SCRAM-SHA-256", "alice", "password");
    assert_eq!(code, 49, "SCRAM against an {{SSHA}} value: {err}");
    let (code, out, err) =
        tool_with_env("ldapwhoami", &["-x", "-H", &url, "-D", ALICE, "-w", "password"], None, &[]);
    assert_eq!((code, out.trim()), (0, format!("dn:{ALICE}").as_str()), "{err}");

    // Password Modify stores {SCRAM-SHA-256} (password_scheme); both binds check it.
    let port = server.addr.port();
    let out = python(&format!(
        r#"
s = Server("127.0.0.1", port={port})
admin = Connection(s, user={ADMIN_DN:?}, password="secret", auto_bind=True)
assert admin.extend.standard.modify_password({ALICE:?}, new_password="n3w-secret"), admin.result
admin.search({ALICE:?}, "(objectClass=*)", search_scope="BASE", attributes=["userPassword"])
value = admin.entries[0].entry_attributes_as_dict["userPassword"][0]
print("stored", as_bytes(value)[:21].decode())
"#
    ));
    assert!(out.contains("stored {SCRAM-SHA-256}4096,"), "{out}");
    let (code, out, err) =
        tool_with_env("ldapwhoami", &["-x", "-H", &url, "-D", ALICE, "-w", "n3w-secret"], None, &[]);
    assert_eq!(
        (code, out.trim()),
        (0, format!("dn:{ALICE}").as_str()),
        "simple bind against SCRAM keys: {err}"
    );
    let (code, out, err) = cyrus(&[], &url, "SCRAM-SHA-256", "alice", "n3w-secret");
    assert_eq!((code, out.trim()), (0, format!("dn:{ALICE}").as_str()), "{err}");
    let (code, _, err) = cyrus(&[], &url, "SCRAM-SHA-256", "alice", "password");
    assert_eq!(code, 49, "the old password: {err}");
    // SHA-256 keys cannot answer SCRAM-SHA-512.
    let (code, _, err) = cyrus(&[], &url, "SCRAM-SHA-512", "alice", "n3w-secret");
    assert_eq!(code, 49, "{err}");

    // The python client: the server's signature, e= reasons, the rootDN, unknown users,
    // malformed messages and an exchange dropped by another request.
    let out = python(&format!(
        r#"
s = Server("127.0.0.1", port={port})
c = Connection(s)
c.open()
print("bob", scram(c, "SCRAM-SHA-256", "bob", "password"), whoami(c))
print("bob512", scram(c, "SCRAM-SHA-512", "bob", "password")[0], whoami(c))
print("alice", scram(c, "SCRAM-SHA-256", "alice", "n3w-secret")[0], whoami(c))
print("wrong", scram(c, "SCRAM-SHA-256", "bob", "nope"), "anonymous after:", repr(whoami(c)))
print("root", scram(c, "SCRAM-SHA-256", "dn:cn=admin,dc=example,dc=com", "secret")[0], whoami(c))
print("same salt for nobody", salt_of(c, "SCRAM-SHA-256", "nobody") == salt_of(c, "SCRAM-SHA-256", "nobody"))
print("fresh salt for cleartext", salt_of(c, "SCRAM-SHA-256", "bob") != salt_of(c, "SCRAM-SHA-256", "bob"))
print("nobody", scram(c, "SCRAM-SHA-256", "nobody", "password")[0])
for bad in [b"n,,", b"x,,n=bob,r=a", b"n,,n=bob=ZZ,r=a", b"n,,m=x,n=bob,r=a", b"n,,n=bob,r=a\x01"]:
    print("malformed", step(c, "SCRAM-SHA-256", bad)[0])
print("plus without tls", step(c, "SCRAM-SHA-256-PLUS", b"p=tls-exporter,,n=bob,r=a")[0])
print("p= without tls", step(c, "SCRAM-SHA-256", b"p=tls-exporter,,n=bob,r=a")[0])
print("no initial response", scram(c, "SCRAM-SHA-512", "bob", "password", no_initial=True)[0], whoami(c))
dropped = lambda: c.search("dc=example,dc=com", "(uid=bob)", search_scope="BASE")
print("dropped", scram(c, "SCRAM-SHA-256", "bob", "password", interpose=dropped)[0])
print("after", scram(c, "SCRAM-SHA-256", "bob", "password")[0], whoami(c))
"#
    ));
    let expect = |line: &str| assert!(out.lines().any(|l| l == line), "no line {line:?} in:\n{out}");
    let server_final_checked =
        out.lines().any(|l| l.starts_with("bob (0, b'v=") && l.ends_with(&format!("dn:{BOB}")));
    assert!(server_final_checked, "{out}");
    expect(&format!("bob512 0 dn:{BOB}"));
    expect(&format!("alice 0 dn:{ALICE}"));
    expect("wrong (49, b'e=invalid-proof') anonymous after: None");
    expect(&format!("root 0 dn:{ADMIN_DN}"));
    expect("same salt for nobody True");
    expect("fresh salt for cleartext True");
    expect("nobody 49");
    assert_eq!(out.lines().filter(|l| *l == "malformed 80").count(), 5, "{out}");
    expect("plus without tls 7");
    expect("p= without tls 80");
    expect(&format!("no initial response 0 dn:{BOB}"));
    // The search between the steps ended the exchange: the client-final then starts one,
    // and is no client-first message.
    expect("dropped 80");
    expect(&format!("after 0 dn:{BOB}"));
}

/// `require_tls_for_binds` refuses PLAIN in the clear but not SCRAM: no password travels.
#[test]
fn require_tls_for_binds_does_not_apply_to_scram() {
    cyrus_has_scram();
    let server = Server::start_with_config(&config(
        "require_tls_for_binds = true\n[testing]\nloopback_is_remote = true",
    ));
    let url = server.url();
    let (code, _, err) =
        tool_with_env("ldapwhoami", &["-x", "-H", &url, "-D", BOB, "-w", "password"], None, &[]);
    assert_eq!(code, 13, "a simple bind from a remote peer in the clear: {err}");
    let (code, out, err) = cyrus(&[], &url, "SCRAM-SHA-256", "bob", "password");
    assert_eq!((code, out.trim()), (0, format!("dn:{BOB}").as_str()), "{err}");
}

/// SCRAM failures count towards the password policy's lockout, as simple binds' do, and a
/// locked account's SCRAM bind fails with the right password.
#[test]
fn scram_failures_lock_the_account_under_a_policy() {
    cyrus_has_scram();
    let policy = "cn=default,ou=policies,dc=example,dc=com";
    let server = Server::start_with_config(&config(&format!("[ppolicy]\ndefault_policy = \"{policy}\"")));
    let mut admin = crate::harness::bound(&server, ADMIN_DN, "secret");
    let ou = vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["policies"].into())];
    assert_eq!(admin.add("ou=policies,dc=example,dc=com", ou).expect("add").rc, 0);
    let attrs: Vec<(&str, std::collections::HashSet<&str>)> = vec![
        ("objectClass", ["organizationalRole", "pwdPolicy"].into()),
        ("cn", ["default"].into()),
        ("pwdAttribute", ["userPassword"].into()),
        ("pwdLockout", ["TRUE"].into()),
        ("pwdMaxFailure", ["2"].into()),
    ];
    assert_eq!(admin.add(policy, attrs).expect("add").rc, 0);
    let url = server.url();
    let (code, out, err) = cyrus(&[], &url, "SCRAM-SHA-256", "bob", "password");
    assert_eq!((code, out.trim()), (0, format!("dn:{BOB}").as_str()), "{err}");
    for attempt in 0..2 {
        let (code, _, err) = cyrus(&[], &url, "SCRAM-SHA-256", "bob", "wrong");
        assert_eq!(code, 49, "failure {attempt}: {err}");
    }
    let (code, _, err) = cyrus(&[], &url, "SCRAM-SHA-256", "bob", "password");
    assert_eq!(code, 49, "locked after two SCRAM failures: {err}");
    let (code, _, err) =
        tool_with_env("ldapwhoami", &["-x", "-H", &url, "-D", BOB, "-w", "password"], None, &[]);
    assert_eq!(code, 49, "a simple bind is locked out too: {err}");
}

fn tls_config(pki: &Pki, ldaps: SocketAddr, tls_extra: &str) -> String {
    config(&format!(
        "listen_ldaps = \"{ldaps}\"\n[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n{tls_extra}\n",
        pki.text("server.pem"),
        pki.text("server.key")
    ))
}

#[test]
fn scram_plus_binds_to_the_tls_channel() {
    cyrus_has_scram();
    let pki = Pki::new();
    let ldaps = free_port();
    let server = Server::start_with_config(&tls_config(&pki, ldaps, ""));
    let ldaps_url = format!("ldaps://{ldaps}");
    let env_owned = pki.env();
    let env: Vec<(&str, &str)> = env_owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (code, out, err) = tool_with_env(
        "ldapsearch",
        &["-x", "-LLL", "-H", &ldaps_url, "-b", "", "-s", "base", "supportedSASLMechanisms"],
        None,
        &env,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("supportedSASLMechanisms: SCRAM-SHA-256-PLUS"), "{out}");
    assert!(out.contains("supportedSASLMechanisms: SCRAM-SHA-512-PLUS"), "{out}");

    // Cyrus SASL with libldap's tls-server-end-point binding, over LDAPS and StartTLS.
    let mut with_cb = env.clone();
    with_cb.push(("LDAPSASL_CBINDING", "tls-endpoint"));
    let (code, out, err) = cyrus(&with_cb, &ldaps_url, "SCRAM-SHA-256-PLUS", "bob", "password");
    assert_eq!((code, out.trim()), (0, format!("dn:{BOB}").as_str()), "-PLUS over LDAPS: {err}");
    let args =
        ["-N", "-Q", "-ZZ", "-Y", "SCRAM-SHA-512-PLUS", "-H", &server.url(), "-U", "bob", "-w", "password"];
    let (code, out, err) = tool_with_env("ldapwhoami", &args, None, &with_cb);
    assert_eq!((code, out.trim()), (0, format!("dn:{BOB}").as_str()), "-PLUS over StartTLS: {err}");
    let (code, _, err) = cyrus(&with_cb, &ldaps_url, "SCRAM-SHA-256-PLUS", "bob", "wrong");
    assert_eq!(code, 49, "{err}");
    // Without channel binding, plain SCRAM still works under TLS.
    let (code, out, err) = cyrus(&env, &ldaps_url, "SCRAM-SHA-256", "bob", "password");
    assert_eq!((code, out.trim()), (0, format!("dn:{BOB}").as_str()), "{err}");

    // python: tls-server-end-point from the certificate it was served, a wrong binding,
    // and "y" (the client could bind but thinks we can't) where we can.
    let out = python(&format!(
        r#"
tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file={ca:?})
c = Connection(Server("127.0.0.1", port={port}, use_ssl=True, tls=tls))
c.open()
end_point = hashlib.sha256(c.socket.getpeercert(binary_form=True)).digest()
gs2 = b"p=tls-server-end-point,,"
print("end-point", scram(c, "SCRAM-SHA-256-PLUS", "bob", "password", gs2=gs2, cb_data=end_point)[0], whoami(c))
print("wrong", scram(c, "SCRAM-SHA-256-PLUS", "bob", "password", gs2=gs2, cb_data=b"x" * 32))
print("y", scram(c, "SCRAM-SHA-256", "bob", "password", gs2=b"y,,")[0])
print("unknown type", scram(c, "SCRAM-SHA-256-PLUS", "bob", "password", gs2=b"p=tls-unique,,")[0])
"#,
        ca = pki.text("ca.pem"),
        port = ldaps.port(),
    ));
    let expect = |line: &str| assert!(out.lines().any(|l| l == line), "no line {line:?} in:\n{out}");
    expect(&format!("end-point 0 dn:{BOB}"));
    expect("wrong (49, b'e=channel-bindings-dont-match')");
    expect("y 49");
    expect("unknown type 80");

    // Rust over rustls: tls-exporter (RFC 9266) under TLS 1.3, SCRAM-SHA-512-PLUS.
    let config = pki.rustls_config();
    let mut tls = tls_over(tcp(ldaps), &config);
    let mut exporter = [0u8; 32];
    tls.conn.export_keying_material(&mut exporter, b"EXPORTER-Channel-Binding", Some(b"")).unwrap();
    let (code, last) = rust_scram_sha512(&mut tls, b"p=tls-exporter,,", &exporter, "password");
    assert_eq!((code, last.starts_with(b"v=")), (0, true), "{}", String::from_utf8_lossy(&last));
    let (code, last) = rust_scram_sha512(&mut tls, b"p=tls-exporter,,", &[0u8; 32], "password");
    assert_eq!((code, last.as_slice()), (49, &b"e=channel-bindings-dont-match"[..]));

    // Under TLS 1.2 tls-exporter is refused (no extended master secret to be sure of), and
    // tls-server-end-point still binds.
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in <rustls::pki_types::CertificateDer as rustls::pki_types::pem::PemObject>::pem_file_iter(
        pki.path("ca.pem"),
    )
    .unwrap()
    {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls12 = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tls = tls_over(tcp(ldaps), &std::sync::Arc::new(tls12));
    send(&mut tls, &sasl_bind(1, "SCRAM-SHA-512-PLUS", b"p=tls-exporter,,n=bob,r=abc"));
    let outcome = parse_result(&read_message(&mut tls).body);
    assert_eq!(outcome.code, 80, "tls-exporter under TLS 1.2: {}", outcome.diagnostic);
    let end_point = sha2::Sha256::digest(tls.conn.peer_certificates().unwrap()[0].as_ref());
    let (code, _) = rust_scram_sha512(&mut tls, b"p=tls-server-end-point,,", &end_point, "password");
    assert_eq!(code, 0, "tls-server-end-point under TLS 1.2");
}

type HmacSha512 = Hmac<Sha512>;

fn hmac512(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = <HmacSha512 as KeyInit>::new_from_slice(key).unwrap();
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// A SCRAM-SHA-512-PLUS exchange as bob over `stream`; the final result code and message.
fn rust_scram_sha512(
    stream: &mut (impl std::io::Read + std::io::Write),
    gs2: &[u8],
    cb_data: &[u8],
    password: &str,
) -> (u32, Vec<u8>) {
    let bare = b"n=bob,r=rustclientnonce".to_vec();
    send(stream, &sasl_bind(1, "SCRAM-SHA-512-PLUS", &[gs2, &bare].concat()));
    let outcome = parse_result(&read_message(stream).body);
    assert_eq!(outcome.code, 14, "{}", outcome.diagnostic);
    let first = outcome.extra.get(&0x87).cloned().expect("serverSaslCreds");
    let text = String::from_utf8(first.clone()).unwrap();
    let field = |name: &str| text.split(',').find_map(|f| f.strip_prefix(name)).unwrap().to_string();
    let (nonce, salt, iterations) = (field("r="), STANDARD.decode(field("s=")).unwrap(), field("i="));
    assert!(nonce.starts_with("rustclientnonce") && nonce.len() > "rustclientnonce".len());
    let mut salted = [0u8; 64];
    pbkdf2::pbkdf2_hmac::<Sha512>(password.as_bytes(), &salt, iterations.parse().unwrap(), &mut salted);
    let client_key = hmac512(&salted, b"Client Key");
    let stored_key = Sha512::digest(&client_key);
    let without_proof = format!("c={},r={nonce}", STANDARD.encode([gs2, cb_data].concat()));
    let auth_message = [&bare[..], b",", &first, b",", without_proof.as_bytes()].concat();
    let signature = hmac512(&stored_key, &auth_message);
    let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
    let last = format!("{without_proof},p={}", STANDARD.encode(proof));
    send(stream, &sasl_bind(2, "SCRAM-SHA-512-PLUS", last.as_bytes()));
    let outcome = parse_result(&read_message(stream).body);
    let last = outcome.extra.get(&0x87).cloned().unwrap_or_default();
    if outcome.code == 0 {
        let server_key = hmac512(&salted, b"Server Key");
        let expected = format!("v={}", STANDARD.encode(hmac512(&server_key, &auth_message)));
        assert_eq!(last, expected.as_bytes(), "the server's signature");
    }
    (outcome.code, last)
}
