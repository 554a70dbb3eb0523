//! TLS, StartTLS and SASL against the real binary, with a CA, server and client
//! certificates made here (rcgen): OpenLDAP's tools (`ldapwhoami -ZZ`, `ldaps://`,
//! `-Y EXTERNAL`, `-Y PLAIN`), `openssl s_client -starttls ldap`, python ldap3 validating
//! the certificate, raw BER under a rustls client for StartTLS's edge cases (RFC 4511
//! §4.14), a certificate rotated under live connections (SIGHUP and file polling), and
//! `require_tls_for_binds` seen from a "remote" peer (`[testing] loopback_is_remote`).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::harness::{free_port, tool_with_env, Server, ADMIN_DN, ADMIN_PW, BASE};
use crate::raw::{bind, message, octets, parse_result, read_message, send, tlv, who_am_i, EXTENDED_RESPONSE};

const START_TLS: &[u8] = b"1.3.6.1.4.1.1466.20037";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";

/// A test CA with a server certificate for 127.0.0.1/localhost and a client certificate
/// for `cn=alice,o=Example`, as PEM files in a temporary directory.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    pub(crate) fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, "Ferrodir test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let pki = Self { dir: tempfile::tempdir().unwrap(), issuer };
        std::fs::write(pki.path("ca.pem"), pki.issuer.pem()).unwrap();
        pki.issue_server("server", "ferrodir test server");
        let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
        client.distinguished_name = DistinguishedName::new();
        client.distinguished_name.push(DnType::OrganizationName, "Example");
        client.distinguished_name.push(DnType::CommonName, "alice");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        pki.write("client", client);
        pki
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn text(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// Writes `<name>.pem` and `<name>.key`: a server certificate whose CN is `cn`.
    fn issue_server(&self, name: &str, cn: &str) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.write(name, params);
    }

    fn write(&self, name: &str, params: CertificateParams) {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        // Key first, then the certificate: a reload that catches the pair half-written
        // must fail (and keep the old pair), never serve a mismatched one.
        std::fs::write(self.path(&format!("{name}.key.new")), key.serialize_pem()).unwrap();
        std::fs::write(self.path(&format!("{name}.pem.new")), cert.pem()).unwrap();
        std::fs::rename(self.path(&format!("{name}.key.new")), self.path(&format!("{name}.key"))).unwrap();
        std::fs::rename(self.path(&format!("{name}.pem.new")), self.path(&format!("{name}.pem"))).unwrap();
    }

    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![("LDAPTLS_CACERT", self.text("ca.pem")), ("LDAPTLS_REQCERT", "demand".to_string())]
    }

    fn client_env(&self) -> Vec<(&'static str, String)> {
        let mut env = self.env();
        env.push(("LDAPTLS_CERT", self.text("client.pem")));
        env.push(("LDAPTLS_KEY", self.text("client.key")));
        env
    }

    pub(crate) fn rustls_config(&self) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(self.path("ca.pem")).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }
}

/// A server with `[tls]` from `pki`, an LDAPS listener and an ldapi socket; `extra` is
/// added at the top level (before any table) and `tls_extra` inside `[tls]`.
fn start(pki: &Pki, extra: &str, tls_extra: &str) -> (Server, SocketAddr, PathBuf) {
    start_with(pki, extra, tls_extra, Server::start_with_config)
}

/// As [`start`], starting the server with `how` (e.g. [`Server::start_logged`]).
fn start_with(
    pki: &Pki,
    extra: &str,
    tls_extra: &str,
    how: fn(&str) -> Server,
) -> (Server, SocketAddr, PathBuf) {
    let ldaps = free_port();
    let ldapi = pki.path("ldapi.sock");
    let config = format!(
        r#"shards = 2
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = true
listen_ldaps = "{ldaps}"
listen_ldapi = "{ldapi}"
{extra}
[[authz_regexp]]
match = 'gidNumber=\d+\+uidNumber=0,cn=peercred,cn=external,cn=auth'
replace = "cn=admin,dc=example,dc=com"
[[authz_regexp]]
match = 'cn=([^,]+),o=example'
replace = "uid=$1,ou=people,dc=example,dc=com"
[tls]
cert_file = "{cert}"
key_file = "{key}"
client_ca_file = "{ca}"
{tls_extra}
[log]
level = "warn"
"#,
        ldapi = ldapi.display(),
        cert = pki.text("server.pem"),
        key = pki.text("server.key"),
        ca = pki.text("ca.pem"),
    );
    (how(&config), ldaps, ldapi)
}

fn run(pki_env: &[(&'static str, String)], name: &str, args: &[&str]) -> (i32, String, String) {
    let env: Vec<(&str, &str)> = pki_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    tool_with_env(name, args, None, &env)
}

fn ldapi_url(path: &Path) -> String {
    format!("ldapi://{}", path.display().to_string().replace('/', "%2F"))
}

fn start_tls_request(id: u32) -> Vec<u8> {
    message(id, &tlv(0x77, &tlv(0x80, START_TLS)))
}

pub(crate) fn tcp(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    stream
}

pub(crate) type TlsStream = StreamOwned<ClientConnection, TcpStream>;

pub(crate) fn tls_over(stream: TcpStream, config: &Arc<ClientConfig>) -> TlsStream {
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = StreamOwned::new(ClientConnection::new(config.clone(), name).unwrap(), stream);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).expect("TLS handshake");
    }
    tls
}

/// StartTLS on `stream` (expecting success), then the handshake.
fn start_tls(mut stream: TcpStream, id: u32, config: &Arc<ClientConfig>) -> TlsStream {
    send(&mut stream, &start_tls_request(id));
    let reply = read_message(&mut stream);
    assert_eq!((reply.id, reply.op), (id, EXTENDED_RESPONSE));
    assert_eq!(parse_result(&reply.body).code, 0, "StartTLS refused");
    tls_over(stream, config)
}

fn who_am_i_on(stream: &mut (impl std::io::Read + std::io::Write), id: u32) -> String {
    send(stream, &who_am_i(id));
    let reply = read_message(stream);
    assert_eq!(reply.id, id);
    let outcome = parse_result(&reply.body);
    assert_eq!(outcome.code, 0, "{}", outcome.diagnostic);
    String::from_utf8(outcome.extra.get(&0x8b).cloned().unwrap_or_default()).unwrap()
}

fn extended_code(
    stream: &mut (impl std::io::Read + std::io::Write),
    request: &[u8],
    id: u32,
) -> (u32, String) {
    send(stream, request);
    let reply = read_message(stream);
    assert_eq!((reply.id, reply.op), (id, EXTENDED_RESPONSE));
    let outcome = parse_result(&reply.body);
    (outcome.code, outcome.diagnostic)
}

#[test]
fn openldap_tools_use_starttls_and_ldaps_with_the_test_ca() {
    let pki = Pki::new();
    let (server, ldaps, _) = start(&pki, "", "");
    let env = pki.env();
    let url = server.url();
    let (code, out, err) =
        run(&env, "ldapwhoami", &["-x", "-ZZ", "-H", &url, "-D", ADMIN_DN, "-w", ADMIN_PW]);
    assert_eq!(code, 0, "ldapwhoami -ZZ: {err}");
    assert_eq!(out.trim(), format!("dn:{ADMIN_DN}"));
    let ldaps_url = format!("ldaps://{ldaps}");
    let (code, out, err) = run(
        &env,
        "ldapsearch",
        &[
            "-x",
            "-LLL",
            "-H",
            &ldaps_url,
            "-b",
            "",
            "-s",
            "base",
            "supportedExtension",
            "supportedSASLMechanisms",
        ],
    );
    assert_eq!(code, 0, "ldapsearch ldaps://: {err}");
    assert!(out.contains("supportedExtension: 1.3.6.1.4.1.1466.20037"), "{out}");
    assert!(
        out.contains("supportedSASLMechanisms: EXTERNAL") && out.contains("supportedSASLMechanisms: PLAIN"),
        "{out}"
    );
    let (code, out, err) =
        run(&env, "ldapsearch", &["-x", "-LLL", "-H", &ldaps_url, "-b", BASE, "(uid=alice)", "uid"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("dn: {ALICE}")), "{out}");
    // A client that does not trust the CA gets no session.
    let (code, _, _) = tool_with_env(
        "ldapwhoami",
        &["-x", "-ZZ", "-H", &url],
        None,
        &[("LDAPTLS_REQCERT", "demand"), ("LDAPTLS_CACERT", "/dev/null")],
    );
    assert_ne!(code, 0, "a client without the CA must refuse the certificate");
}

#[test]
fn openssl_verifies_starttls_and_old_protocol_versions_are_refused() {
    let pki = Pki::new();
    let (server, ldaps, _) = start(&pki, "", "");
    let s_client = |args: &[&str]| {
        let output = Command::new("openssl")
            .arg("s_client")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run openssl");
        String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
    };
    let plain = server.addr.to_string();
    let out = s_client(&["-starttls", "ldap", "-connect", &plain, "-CAfile", &pki.text("ca.pem")]);
    assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
    assert!(out.contains("ferrodir test server"), "{out}");
    // A TLS 1.1 ClientHello (SECLEVEL=0 so that the client really sends one) is refused.
    let old = ldaps.to_string();
    let out = s_client(&["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0", "-connect", &old]);
    assert!(
        out.contains("Cipher is (NONE)") && out.contains("no peer certificate available"),
        "TLS 1.1 accepted: {out}"
    );
    assert!(out.contains("alert"), "{out}");
    // min_version = "1.2" is the default: TLS 1.2 and 1.3 both work.
    for version in ["-tls1_2", "-tls1_3"] {
        let out = s_client(&[version, "-connect", &old, "-CAfile", &pki.text("ca.pem")]);
        assert!(out.contains("Verify return code: 0 (ok)"), "{version}: {out}");
    }
}

#[test]
fn python_ldap3_validates_the_certificate_over_ldaps_and_starttls() {
    let pki = Pki::new();
    let (server, ldaps, _) = start(&pki, "", "");
    let script = format!(
        r#"
import ssl, sys
from ldap3 import Server, Connection, Tls
tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file={ca:?})
s = Server("127.0.0.1", port={ldaps_port}, use_ssl=True, tls=tls)
c = Connection(s, user={admin:?}, password="secret", auto_bind=True)
print("ldaps", c.extend.standard.who_am_i())
s = Server("127.0.0.1", port={plain_port}, tls=tls)
c = Connection(s, user={alice:?}, password="password")
c.open(); c.start_tls(); c.bind()
print("starttls", c.extend.standard.who_am_i(), c.tls_started)
bad = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file="/etc/ssl/certs/ca-certificates.crt")
try:
    Connection(Server("127.0.0.1", port={ldaps_port}, use_ssl=True, tls=bad), auto_bind=True)
    print("untrusted accepted")
except Exception as e:
    print("untrusted refused")
"#,
        ca = pki.text("ca.pem"),
        ldaps_port = ldaps.port(),
        plain_port = server.addr.port(),
        admin = ADMIN_DN,
        alice = ALICE,
    );
    let output = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("python3 (install python3-ldap3)");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}{}", String::from_utf8_lossy(&output.stderr));
    assert!(out.contains(&format!("ldaps dn:{ADMIN_DN}")), "{out}");
    assert!(out.contains(&format!("starttls dn:{ALICE} True")), "{out}");
    assert!(out.contains("untrusted refused"), "{out}");
}

#[test]
fn starttls_edge_cases_follow_rfc_4511_and_slapd() {
    let pki = Pki::new();
    let (server, ldaps, _) = start(&pki, "", "");
    let config = pki.rustls_config();

    // Operations outstanding: a search pipelined just before StartTLS is still in flight.
    let mut stream = tcp(server.addr);
    let mut both = crate::raw::search(1, BASE, 2, &crate::raw::present("objectClass"), &[]);
    both.extend(start_tls_request(2));
    send(&mut stream, &both);
    let mut start_tls_result = None;
    for _ in 0..64 {
        let reply = read_message(&mut stream);
        if reply.id == 2 {
            start_tls_result = Some(parse_result(&reply.body));
            break;
        }
    }
    let outcome = start_tls_result.expect("an answer to StartTLS");
    assert_eq!(outcome.code, 1, "StartTLS with a search outstanding: {}", outcome.diagnostic);

    // A bind made in the clear does not survive StartTLS (slapd drops to anonymous), and
    // plaintext pipelined behind StartTLS is discarded, never run inside the TLS session.
    let mut stream = tcp(server.addr);
    send(&mut stream, &bind(1, ADMIN_DN, ADMIN_PW));
    assert_eq!(parse_result(&read_message(&mut stream).body).code, 0);
    let mut injected = start_tls_request(2);
    injected.extend(bind(3, ADMIN_DN, ADMIN_PW));
    injected.extend(who_am_i(4));
    send(&mut stream, &injected);
    let reply = read_message(&mut stream);
    assert_eq!((reply.id, parse_result(&reply.body).code), (2, 0));
    let mut tls = tls_over(stream, &config);
    assert_eq!(who_am_i_on(&mut tls, 5), "", "the clear-text bind or the injected one carried over");

    // A second StartTLS on the protected connection: operationsError; the session goes on.
    let (code, diagnostic) = extended_code(&mut tls, &start_tls_request(6), 6);
    assert_eq!(code, 1, "{diagnostic}");
    assert_eq!(who_am_i_on(&mut tls, 7), "");

    // StartTLS on LDAPS: operationsError too.
    let mut tls = tls_over(tcp(ldaps), &config);
    let (code, diagnostic) = extended_code(&mut tls, &start_tls_request(1), 1);
    assert_eq!(code, 1, "{diagnostic}");

    // With a request value: protocolError.
    let mut stream = tcp(server.addr);
    let with_value = message(1, &tlv(0x77, &[tlv(0x80, START_TLS), tlv(0x81, b"x")].concat()));
    let (code, _) = extended_code(&mut stream, &with_value, 1);
    assert_eq!(code, 2);
    // And the connection still takes a proper StartTLS afterwards.
    let mut tls = start_tls(stream, 2, &config);
    send(&mut tls, &bind(3, BOB, "password"));
    assert_eq!(parse_result(&read_message(&mut tls).body).code, 0);
    assert_eq!(who_am_i_on(&mut tls, 4), format!("dn:{BOB}"));
}

#[test]
fn starttls_without_a_certificate_is_a_protocol_error_and_not_advertised() {
    // As slapd 2.5 without TLS settings (tests/conformance/edges.rs compares the two): an
    // extended operation the server does not offer.
    let server = Server::start();
    let mut stream = tcp(server.addr);
    let (code, diagnostic) = extended_code(&mut stream, &start_tls_request(1), 1);
    assert_eq!(code, 2, "{diagnostic}");
    let (_, out, _) = crate::harness::tool(
        "ldapsearch",
        &["-x", "-LLL", "-H", &server.url(), "-b", "", "-s", "base", "supportedExtension"],
        None,
    );
    assert!(!out.contains("1.3.6.1.4.1.1466.20037"), "{out}");
}

#[test]
fn sasl_external_from_a_client_certificate_and_ldapi_and_plain_under_tls() {
    let pki = Pki::new();
    let (server, ldaps, ldapi) = start(&pki, "", r#"client_certs = "try""#);
    let url = server.url();
    let client = pki.client_env();
    let (code, out, err) = run(&client, "ldapwhoami", &["-Y", "EXTERNAL", "-ZZ", "-H", &url]);
    assert_eq!(code, 0, "EXTERNAL over StartTLS: {err}");
    assert_eq!(out.trim(), format!("dn:{ALICE}"), "the subject cn=alice,o=Example mapped by authz_regexp");
    let (code, out, err) = run(&client, "ldapwhoami", &["-Y", "EXTERNAL", "-H", &format!("ldaps://{ldaps}")]);
    assert_eq!((code, out.trim()), (0, format!("dn:{ALICE}").as_str()), "EXTERNAL over LDAPS: {err}");
    // Without a certificate EXTERNAL has nothing to go on.
    let (code, _, err) = run(&pki.env(), "ldapwhoami", &["-Y", "EXTERNAL", "-ZZ", "-H", &url]);
    assert_ne!(code, 0, "EXTERNAL without a certificate: {err}");
    // ldapi: the peer's uid 0 maps to the rootDN (this test runs as root, as CI does);
    // otherwise the peercred name itself is the identity.
    let (code, out, err) = run(&[], "ldapwhoami", &["-Y", "EXTERNAL", "-H", &ldapi_url(&ldapi)]);
    assert_eq!(code, 0, "EXTERNAL over ldapi: {err}");
    let uid = current_uid();
    let expected = if uid == 0 {
        format!("dn:{ADMIN_DN}")
    } else {
        format!("dn:gidnumber={}+uidnumber={uid},cn=peercred,cn=external,cn=auth", gid())
    };
    assert_eq!(out.trim().to_ascii_lowercase(), expected.to_ascii_lowercase());
    // PLAIN under TLS, with a DN or with a mapped user name.
    let env = pki.env();
    let (code, out, err) = run(
        &env,
        "ldapwhoami",
        &["-Y", "PLAIN", "-ZZ", "-H", &url, "-U", &format!("dn:{BOB}"), "-w", "password"],
    );
    assert_eq!((code, out.trim()), (0, format!("dn:{BOB}").as_str()), "PLAIN: {err}");
    let (code, _, err) = run(
        &env,
        "ldapwhoami",
        &["-Y", "PLAIN", "-ZZ", "-H", &url, "-U", &format!("dn:{BOB}"), "-w", "wrong"],
    );
    assert_eq!(code, 49, "PLAIN with a wrong password: {err}");
    // PLAIN in the clear is refused by the server (raw: the tools refuse it themselves).
    let mut stream = tcp(server.addr);
    send(&mut stream, &sasl_bind(1, "PLAIN", format!("\0dn:{BOB}\0password").as_bytes()));
    let outcome = parse_result(&read_message(&mut stream).body);
    assert_eq!(outcome.code, 13, "{}", outcome.diagnostic);
    // An unknown mechanism.
    send(&mut stream, &sasl_bind(2, "DIGEST-MD5", b""));
    assert_eq!(parse_result(&read_message(&mut stream).body).code, 7);
}

#[test]
fn demanded_client_certificates_gate_the_handshake() {
    let pki = Pki::new();
    let (server, ldaps, _) = start(&pki, "", r#"client_certs = "demand""#);
    let (code, _, _) = run(&pki.env(), "ldapwhoami", &["-x", "-H", &format!("ldaps://{ldaps}")]);
    assert_ne!(code, 0, "a handshake without a client certificate must fail under demand");
    let (code, out, err) =
        run(&pki.client_env(), "ldapwhoami", &["-Y", "EXTERNAL", "-H", &format!("ldaps://{ldaps}")]);
    assert_eq!((code, out.trim()), (0, format!("dn:{ALICE}").as_str()), "{err}");
    // The plain listener itself stays usable without TLS.
    let (code, _, err) = run(&[], "ldapwhoami", &["-x", "-H", &server.url()]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn cleartext_passwords_from_remote_peers_get_confidentiality_required() {
    let pki = Pki::new();
    let (server, _, _) = start(&pki, "[testing]\nloopback_is_remote = true", "");
    let url = server.url();
    let (code, _, err) = run(&[], "ldapwhoami", &["-x", "-H", &url, "-D", ADMIN_DN, "-w", ADMIN_PW]);
    assert_eq!(code, 13, "a simple bind in the clear from a remote peer: {err}");
    // Anonymous binds need no password and stay allowed; under StartTLS the bind works.
    let (code, _, err) = run(&[], "ldapwhoami", &["-x", "-H", &url]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) =
        run(&pki.env(), "ldapwhoami", &["-x", "-ZZ", "-H", &url, "-D", BOB, "-w", "password"]);
    assert_eq!((code, out.trim()), (0, format!("dn:{BOB}").as_str()), "{err}");
}

#[test]
fn a_rotated_certificate_reaches_new_connections_and_old_ones_go_on() {
    let pki = Pki::new();
    // Logged: the refused reload below is seen in the server's log, not waited out.
    let (server, ldaps, _) = start_with(&pki, "", "reload_poll_s = 1", Server::start_logged);
    let config = pki.rustls_config();
    let served = |addr: SocketAddr| {
        let tls = tls_over(tcp(addr), &config);
        tls.conn.peer_certificates().and_then(|c| c.first()).map(|c| c.as_ref().to_vec()).unwrap()
    };
    let current = || CertificateDer::from_pem_file(pki.path("server.pem")).unwrap().as_ref().to_vec();
    let mut live = tls_over(tcp(ldaps), &config);
    let mut live_starttls = start_tls(tcp(server.addr), 1, &config);
    assert_eq!(served(ldaps), current());

    // SIGHUP: the new pair is served at once.
    pki.issue_server("server", "rotated by SIGHUP");
    let status = Command::new("kill").arg("-HUP").arg(server.pid().unwrap().to_string()).status().unwrap();
    assert!(status.success());
    let rotated = current();
    assert!(wait_for(|| served(ldaps) == rotated), "SIGHUP did not load the new certificate");

    // No signal, only new files (as Kubernetes rotates a Secret): the poll finds them.
    std::thread::sleep(Duration::from_millis(1100));
    pki.issue_server("server", "rotated by polling");
    let polled = current();
    assert!(wait_for(|| served(ldaps) == polled), "the poll did not load the new certificate");

    // A broken file is refused and the last good pair stays in use.
    std::fs::write(
        pki.path("server.key"),
        b"-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let refusals = || server.log().matches("TLS reload failed").count();
    let refused_before = refusals();
    Command::new("kill").arg("-HUP").arg(server.pid().unwrap().to_string()).status().unwrap();
    // The server tried the broken pair (SIGHUP or the poll) and said it kept the old one.
    assert!(
        wait_for(|| refusals() > refused_before),
        "no \"TLS reload failed\" in the server's log after a broken key and SIGHUP:\n{}",
        server.log()
    );
    assert_eq!(served(ldaps), polled, "a bad key must not replace the good pair");

    // Connections made before any of it carried on.
    assert_eq!(who_am_i_on(&mut live, 1), "");
    assert_eq!(who_am_i_on(&mut live_starttls, 2), "");
    let (code, _, err) = run(&pki.env(), "ldapwhoami", &["-x", "-ZZ", "-H", &server.url()]);
    assert_eq!(code, 0, "{err}");
}

fn wait_for(mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

pub(crate) fn sasl_bind(id: u32, mechanism: &str, credentials: &[u8]) -> Vec<u8> {
    let sasl = tlv(0xa3, &[octets(mechanism.as_bytes()), octets(credentials)].concat());
    message(id, &tlv(0x60, &[crate::raw::int(0x02, 3), octets(b""), sasl].concat()))
}

fn current_uid() -> u32 {
    id_value("-u")
}

fn gid() -> u32 {
    id_value("-g")
}

fn id_value(flag: &str) -> u32 {
    let output = Command::new("id").arg(flag).output().unwrap();
    String::from_utf8_lossy(&output.stdout).trim().parse().unwrap()
}

#[test]
fn password_modify_under_starttls_from_a_remote_peer() {
    let pki = Pki::new();
    let (server, _, _) = start(&pki, "[testing]\nloopback_is_remote = true", "");
    let url = server.url();
    let env = pki.env();
    // In the clear from a peer on another host: confidentialityRequired before anything.
    let mut stream = tcp(server.addr);
    let config = pki.rustls_config();
    let passwd_modify = |id: u32| message(id, &tlv(0x77, &tlv(0x80, b"1.3.6.1.4.1.4203.1.11.1")));
    let (code, diagnostic) = extended_code(&mut stream, &passwd_modify(1), 1);
    assert_eq!(code, 13, "a password change in the clear from another host: {diagnostic}");
    // Under TLS the same request gets as far as the identity check.
    let mut tls = start_tls(stream, 2, &config);
    let (code, diagnostic) = extended_code(&mut tls, &passwd_modify(3), 3);
    assert_eq!(code, 8, "anonymous, under TLS: {diagnostic}");
    // Self, over StartTLS with ldappasswd -ZZ, then the admin resets it.
    let (code, _, err) = run(
        &env,
        "ldappasswd",
        &["-x", "-ZZ", "-H", &url, "-D", BOB, "-w", "password", "-a", "password", "-s", "changed"],
    );
    assert_eq!(code, 0, "ldappasswd -ZZ (self): {err}");
    let (code, out, err) = run(&env, "ldapwhoami", &["-x", "-ZZ", "-H", &url, "-D", BOB, "-w", "changed"]);
    assert_eq!((code, out.trim()), (0, format!("dn:{BOB}").as_str()), "{err}");
    let (code, _, err) = run(
        &env,
        "ldappasswd",
        &["-x", "-ZZ", "-H", &url, "-D", ADMIN_DN, "-w", ADMIN_PW, "-s", "reset", BOB],
    );
    assert_eq!(code, 0, "ldappasswd -ZZ (admin): {err}");
    let (code, _, _) = run(&env, "ldapwhoami", &["-x", "-ZZ", "-H", &url, "-D", BOB, "-w", "reset"]);
    assert_eq!(code, 0);
}

/// A replication consumer (`[[replication]]`) reaches its provider over LDAPS and over
/// StartTLS, verifying the provider's certificate with `tls_ca_file`.
#[test]
fn a_replica_follows_its_provider_over_ldaps_and_starttls() {
    let pki = Pki::new();
    let (provider, ldaps, _) = start(&pki, "", "");
    let password = pki.path("replication.password");
    std::fs::write(&password, ADMIN_PW).unwrap();
    let replica = |url: &str, starttls: bool| {
        Server::start_with_config(&format!(
            r#"shards = 2
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = false
[log]
level = "warn"
[[replication]]
rid = 1
provider = "{url}"
starttls = {starttls}
tls_ca_file = "{ca}"
bind_dn = "{ADMIN_DN}"
password_file = "{pw}"
search_base = "{BASE}"
retry = "1 +"
"#,
            ca = pki.text("ca.pem"),
            pw = password.display(),
        ))
    };
    let over_ldaps = replica(&format!("ldaps://127.0.0.1:{}", ldaps.port()), false);
    let over_starttls = replica(&provider.url(), true);
    for (name, server) in [("ldaps", &over_ldaps), ("StartTLS", &over_starttls)] {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let mut client = crate::harness::bound(server, ADMIN_DN, ADMIN_PW);
            let found = client
                .search(ALICE, ldap3::Scope::Base, "(objectClass=*)", vec!["entryUUID"])
                .ok()
                .and_then(|r| r.success().ok())
                .is_some_and(|(entries, _)| entries.len() == 1);
            if found {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the replica over {name} has no data after 20s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
