//! Password storage and Password Modify (RFC 3062), through the real binary:
//! - cleartext userPassword values written by Add and Modify are stored as `{ARGON2}`
//!   (argon2id), pre-hashed values as given, and both bind; deleting by cleartext value
//!   answers noSuchAttribute, as slapd does;
//! - binds against hashes made by other tools: slappasswd, `openssl passwd -6`, 389-ds's
//!   `pwdhash`; and a rootDN whose root_password is a hash;
//! - an unknown DN, a wrong password and an entry without userPassword take as long;
//! - a full hash queue answers busy (51) at once, and no bind hangs;
//! - Password Modify with ldappasswd (self, admin reset, generated password, refusals),
//!   with python3-ldap3, and with a malformed request value;
//! - `ferrodir import` stores userPassword as the file holds it.

use std::time::{Duration, Instant};

use ldap3::exop::Exop;
use ldap3::{Mod, Scope, SearchEntry};

use crate::harness::{connect_url, tool, Client, Server, ADMIN_DN, ADMIN_PW, BASE, TEST_CONFIG};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const STAFF: &str = "cn=staff,ou=groups,dc=example,dc=com";
const PASSWORD_MODIFY_OID: &str = "1.3.6.1.4.1.4203.1.11.1";
const ARGON2ID_PREFIX: &str = "{ARGON2}$argon2id$v=19$m=19456,t=2,p=1$";

/// `slappasswd -o module-load=argon2 -h {ARGON2} -s secret` (argon2i, m=4096, t=3).
const SLAPPASSWD_ARGON2_SECRET: &str =
    "{ARGON2}$argon2i$v=19$m=4096,t=3,p=1$qjpkhMs9TIRGP5742kfU3Q$XJ58LbSyvu4hkSayXkOG27qfMy3ynkfHIcmFw2IGteQ";
/// `pwdhash -s PBKDF2_SHA256 secret` (389-ds-base 2.3).
const PWDHASH_PBKDF2_SHA256_SECRET: &str = "{PBKDF2_SHA256}AAAgAGb4MMxnXZOhgjxOW+y+2QFmL58yCgd5Ru1MprAFqDNMbnZbAa8qyOr088ay02zkD/nrM0XvhU5Ngxcd17d2sR78CtvLv6s11f5G58h4f/cgKX+7DYPeKCQ//c7jf6hOr6sBrC391UG097Pa+o7ViFi25wHt40YM/Bx9C3CciG5Zjl2rchMjtg/vxdp0lJdDiYdSLO9+KUefJhPGnwGedTXV4mdHbjKRize5+pdfp6R9arWMAbNgA1+FLQ0afjJotuCHR1gegRc++ol36Nwa4wA0kQlmYlQMNLfmRj7rRkFfg6qxY6NHVZBT5FcE4linbQ9gFaRAIUpVwj0DCsJrhVdFRf2JfT8V6sUqm/lS04iB4zj1Yp4ecaqFoK2AivMLbttujn4Lp9s1sfFEiKLIrFCNC4B//TSvdsGuvsL6l4NT";

fn dn_of(uid: &str) -> String {
    format!("uid={uid},{PEOPLE}")
}

fn bind_rc(server: &Server, dn: &str, password: &str) -> u32 {
    let mut client = connect_url(&server.url());
    client.simple_bind(dn, password).expect("bind").rc
}

fn bound(server: &Server, dn: &str, password: &str) -> Client {
    let mut client = connect_url(&server.url());
    let result = client.simple_bind(dn, password).expect("bind");
    assert_eq!(result.rc, 0, "bind as {dn}: {result:?}");
    client
}

fn admin(server: &Server) -> Client {
    bound(server, ADMIN_DN, ADMIN_PW)
}

/// Adds an inetOrgPerson `uid` under ou=people with these userPassword values (none: no
/// attribute).
fn add_person(client: &mut Client, uid: &str, passwords: &[&str]) {
    let mut attrs = vec![
        ("objectClass", ["inetOrgPerson"].into_iter().collect()),
        ("uid", [uid].into_iter().collect()),
        ("cn", [uid].into_iter().collect()),
        ("sn", [uid].into_iter().collect()),
    ];
    if !passwords.is_empty() {
        attrs.push(("userPassword", passwords.iter().copied().collect()));
    }
    let result = client.add(&dn_of(uid), attrs).expect("add");
    assert_eq!(result.rc, 0, "add {uid}: {result:?}");
}

/// The stored userPassword values, read as the rootDN.
fn stored(server: &Server, dn: &str) -> Vec<String> {
    let mut root = admin(server);
    let (entries, _) = root
        .search(dn, Scope::Base, "(objectClass=*)", vec!["userPassword"])
        .expect("search")
        .success()
        .expect("read");
    let entry = SearchEntry::construct(entries.into_iter().next().expect("the entry"));
    let text = entry.attrs.get("userPassword").cloned().unwrap_or_default();
    let binary = entry
        .bin_attrs
        .get("userPassword")
        .map(|values| values.iter().map(|v| String::from_utf8_lossy(v).into_owned()).collect::<Vec<_>>())
        .unwrap_or_default();
    text.into_iter().chain(binary).collect()
}

#[test]
fn cleartext_is_stored_as_argon2id_and_hashes_as_given() {
    let server = Server::start();
    let mut root = admin(&server);
    add_person(&mut root, "carol", &["carol-secret"]);
    let values = stored(&server, &dn_of("carol"));
    assert_eq!(values.len(), 1, "{values:?}");
    assert!(values[0].starts_with(ARGON2ID_PREFIX), "{values:?}");
    assert_eq!(bind_rc(&server, &dn_of("carol"), "carol-secret"), 0);
    assert_eq!(bind_rc(&server, &dn_of("carol"), "carol-Secret"), 49);

    // A value already in a scheme the server reads is stored as given.
    let ssha = tool_output("slappasswd", &["-h", "{SSHA}", "-s", "dave-secret"]);
    add_person(&mut root, "dave", &[&ssha]);
    assert_eq!(stored(&server, &dn_of("dave")), vec![ssha.clone()]);
    assert_eq!(bind_rc(&server, &dn_of("dave"), "dave-secret"), 0);

    // Modify: replace and add hash cleartext values too.
    let result =
        root.modify(&dn_of("dave"), vec![Mod::Replace("userPassword", ["replaced"].into())]).expect("modify");
    assert_eq!(result.rc, 0, "{result:?}");
    let result =
        root.modify(&dn_of("dave"), vec![Mod::Add("userPassword", ["added"].into())]).expect("modify");
    assert_eq!(result.rc, 0, "{result:?}");
    let values = stored(&server, &dn_of("dave"));
    assert_eq!(values.len(), 2, "{values:?}");
    assert!(values.iter().all(|v| v.starts_with(ARGON2ID_PREFIX)), "{values:?}");
    assert_eq!(bind_rc(&server, &dn_of("dave"), "replaced"), 0);
    assert_eq!(bind_rc(&server, &dn_of("dave"), "added"), 0);
    assert_eq!(bind_rc(&server, &dn_of("dave"), "dave-secret"), 49);

    // Deleting by cleartext compares with the stored hash, as slapd does: no such value.
    let result =
        root.modify(&dn_of("dave"), vec![Mod::Delete("userPassword", ["added"].into())]).expect("modify");
    assert_eq!(result.rc, 16, "{result:?}");
    // By the stored value itself, it goes.
    let hashed = values[1].clone();
    let result = root
        .modify(&dn_of("dave"), vec![Mod::Delete("userPassword", [hashed.as_str()].into())])
        .expect("modify");
    assert_eq!(result.rc, 0, "{result:?}");
    assert_eq!(stored(&server, &dn_of("dave")).len(), 1);
}

#[test]
fn open_read_stores_cleartext_as_slapd_without_hash_cleartext() {
    let server =
        Server::start_with_config(&TEST_CONFIG.replacen("[log]", "access = \"open-read\"\n[log]", 1));
    let mut root = admin(&server);
    add_person(&mut root, "erin", &["erin-secret"]);
    assert_eq!(stored(&server, &dn_of("erin")), vec!["erin-secret".to_string()]);
    assert_eq!(bind_rc(&server, &dn_of("erin"), "erin-secret"), 0);
}

/// Runs a tool that prints one line; returns it.
fn tool_output(name: &str, args: &[&str]) -> String {
    let (code, stdout, stderr) = tool(name, args, None);
    assert_eq!(code, 0, "{name} {args:?}: {stderr}");
    stdout.trim().to_string()
}

#[test]
fn binds_against_hashes_made_by_other_tools() {
    // The rootDN's root_password may be a hash too.
    let config = TEST_CONFIG.replacen(
        "root_password = \"secret\"",
        &format!("root_password = \"{SLAPPASSWD_ARGON2_SECRET}\""),
        1,
    );
    let server = Server::start_with_config(&config);
    let mut root = admin(&server);
    assert_eq!(bind_rc(&server, ADMIN_DN, "wrong"), 49);
    let ssha512 =
        tool_output("slappasswd", &["-o", "module-load=pw-sha2", "-h", "{SSHA512}", "-s", "secret"]);
    let sha_crypt = format!("{{CRYPT}}{}", tool_output("openssl", &["passwd", "-6", "secret"]));
    let sha256_crypt = format!("{{CRYPT}}{}", tool_output("openssl", &["passwd", "-5", "secret"]));
    let cases = [
        ("ssha512", ssha512),
        ("sha512crypt", sha_crypt),
        ("sha256crypt", sha256_crypt),
        ("argon2i", SLAPPASSWD_ARGON2_SECRET.to_string()),
        ("pbkdf2ds", PWDHASH_PBKDF2_SHA256_SECRET.to_string()),
    ];
    for (uid, hash) in &cases {
        add_person(&mut root, uid, &[hash]);
        assert_eq!(stored(&server, &dn_of(uid)), vec![hash.clone()], "{uid}: stored as given");
    }
    for (uid, hash) in &cases {
        assert_eq!(bind_rc(&server, &dn_of(uid), "secret"), 0, "{uid}: {hash}");
        assert_eq!(bind_rc(&server, &dn_of(uid), "secret2"), 49, "{uid}: {hash}");
    }
}

/// An unknown DN, a wrong password and an entry without userPassword get the same answer
/// after the same work: each bind checks a hash on the password pool (the last two against
/// the dummy hash), which is what makes them take as long. With one hash thread and a queue
/// of one, a burst of 32 such binds at once must overflow the pool for every kind: a kind
/// answered without a check would never be busy. How alike their times are is measured by
/// `bench/bind-timing.py` (docs/BENCHMARKS.md, "Bind timing"), not here.
#[test]
fn unknown_dn_wrong_password_and_no_password_do_the_same_work() {
    let config =
        TEST_CONFIG.replacen("[log]", "password_hash_threads = 1\npassword_hash_queue_max = 1\n[log]", 1);
    let server = Server::start_with_config(&config);
    let mut root = admin(&server);
    add_person(&mut root, "frank", &["frank-secret"]);
    let attempts = [
        ("unknown DN", "uid=nobody,ou=people,dc=example,dc=com".to_string()),
        ("wrong password", dn_of("frank")),
        ("no userPassword", STAFF.to_string()),
    ];
    const BINDS: usize = 32;
    let url = server.url();
    for (kind, dn) in &attempts {
        // One at a time: the same answer, invalidCredentials with no diagnostic.
        let mut client = connect_url(&url);
        let result = client.simple_bind(dn, "not-the-password").expect("bind");
        assert_eq!((result.rc, result.text.as_str()), (49, ""), "{kind}");
        // All at once: some wait for the one hash thread, and the pool turns the rest away.
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(BINDS));
        let threads: Vec<_> = (0..BINDS)
            .map(|_| {
                let (url, dn, barrier) = (url.clone(), dn.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut client = connect_url(&url);
                    barrier.wait();
                    let result = client.simple_bind(&dn, "not-the-password").expect("bind answered");
                    (result.rc, result.text)
                })
            })
            .collect();
        let outcomes: Vec<(u32, String)> =
            threads.into_iter().map(|t| t.join().expect("bind thread")).collect();
        let busy = outcomes.iter().filter(|(rc, _)| *rc == 51).count();
        let refused = outcomes.iter().filter(|(rc, text)| *rc == 49 && text.is_empty()).count();
        assert_eq!(busy + refused, BINDS, "{kind}: only invalidCredentials or busy: {outcomes:?}");
        assert!(busy > 0 && refused > 0, "{kind}: some checked, some turned away by the pool: {outcomes:?}");
    }
}

#[test]
fn a_full_hash_queue_answers_busy_and_nothing_hangs() {
    let config =
        TEST_CONFIG.replacen("[log]", "password_hash_threads = 1\npassword_hash_queue_max = 1\n[log]", 1);
    let server = Server::start_with_config(&config);
    let mut root = admin(&server);
    add_person(&mut root, "grace", &["grace-secret"]);
    let url = server.url();
    const BINDS: usize = 32;
    let started = Instant::now();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(BINDS));
    let threads: Vec<_> = (0..BINDS)
        .map(|_| {
            let (url, barrier) = (url.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut client = connect_url(&url);
                barrier.wait();
                let result = client.simple_bind(&dn_of("grace"), "grace-secret").expect("bind answered");
                (result.rc, result.text)
            })
        })
        .collect();
    let outcomes: Vec<(u32, String)> = threads.into_iter().map(|t| t.join().expect("bind thread")).collect();
    let busy = outcomes.iter().filter(|(rc, _)| *rc == 51).count();
    let bound = outcomes.iter().filter(|(rc, _)| *rc == 0).count();
    assert_eq!(busy + bound, BINDS, "only success or busy: {outcomes:?}");
    assert!(busy > 0 && bound > 0, "some busy, some bound: {outcomes:?}");
    assert!(outcomes.iter().any(|(rc, text)| *rc == 51 && text == "too many password checks in progress"));
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    // Once the burst is over, binds go through again.
    assert_eq!(bind_rc(&server, &dn_of("grace"), "grace-secret"), 0);
}

/// ldappasswd against `server`: (result code, stdout followed by stderr). ldappasswd exits
/// with 1 on any failure and prints `Result: <text> (<code>)`; success is 0.
fn ldappasswd(server: &Server, args: &[&str]) -> (i32, String) {
    let url = server.url();
    let mut all = vec!["-x", "-H", url.as_str()];
    all.extend_from_slice(args);
    let (exit, stdout, stderr) = tool("ldappasswd", &all, None);
    let text = stdout + &stderr;
    if exit == 0 {
        return (0, text);
    }
    let code = text
        .lines()
        .find_map(|line| line.strip_prefix("Result: "))
        .and_then(|rest| rest.rsplit_once('(')?.1.strip_suffix(')')?.parse().ok())
        .unwrap_or_else(|| panic!("ldappasswd failed with no result code: {text}"));
    (code, text)
}

#[test]
fn password_modify_with_ldappasswd() {
    let server = Server::start();
    let mut root = admin(&server);
    add_person(&mut root, "heidi", &["old-secret"]);
    let heidi = dn_of("heidi");

    // Self, with the old password checked.
    let (code, output) =
        ldappasswd(&server, &["-D", &heidi, "-w", "old-secret", "-a", "old-secret", "-s", "new-secret"]);
    assert_eq!(code, 0, "{output}");
    assert_eq!(bind_rc(&server, &heidi, "new-secret"), 0);
    assert_eq!(bind_rc(&server, &heidi, "old-secret"), 49);
    let values = stored(&server, &heidi);
    assert!(values.len() == 1 && values[0].starts_with(ARGON2ID_PREFIX), "{values:?}");

    // A wrong old password: unwillingToPerform, as slapd.
    let (code, output) = ldappasswd(&server, &["-D", &heidi, "-w", "new-secret", "-a", "wrong", "-s", "x"]);
    assert_eq!(code, 53, "{output}");
    assert!(output.contains("unwilling to verify old password"), "{output}");

    // The admin resets it, naming the user.
    let (code, output) = ldappasswd(&server, &["-D", ADMIN_DN, "-w", ADMIN_PW, "-s", "reset-secret", &heidi]);
    assert_eq!(code, 0, "{output}");
    assert_eq!(bind_rc(&server, &heidi, "reset-secret"), 0);
    assert_eq!(bind_rc(&server, &heidi, "new-secret"), 49);

    // No new password: one is generated and returned.
    let (code, stdout) = ldappasswd(&server, &["-D", ADMIN_DN, "-w", ADMIN_PW, &heidi]);
    assert_eq!(code, 0, "{stdout}");
    let generated = stdout
        .lines()
        .find_map(|l| l.strip_prefix("New password: "))
        .expect("a generated password")
        .trim()
        .to_string();
    assert_eq!(generated.len(), 16, "{stdout}");
    assert_eq!(bind_rc(&server, &heidi, &generated), 0);
    assert_eq!(bind_rc(&server, &heidi, "reset-secret"), 49);

    // Another user may not change heidi's password; anonymous may change none.
    let (code, output) = ldappasswd(&server, &["-D", BOB, "-w", "password", "-s", "stolen", &heidi]);
    assert_eq!(code, 50, "{output}");
    let (code, output) = ldappasswd(&server, &["-s", "stolen", &heidi]);
    assert_eq!(code, 8, "{output}");
    assert!(output.contains("only authenticated users may change passwords"), "{output}");
    // The rootDN has no entry to hold a password.
    let (code, output) = ldappasswd(&server, &["-D", ADMIN_DN, "-w", ADMIN_PW, "-s", "x"]);
    assert_eq!(code, 53, "{output}");
    // An unknown user.
    let (code, output) = ldappasswd(
        &server,
        &["-D", ADMIN_DN, "-w", ADMIN_PW, "-s", "x", "uid=nobody,ou=people,dc=example,dc=com"],
    );
    assert_eq!(code, 32, "{output}");
    assert_eq!(bind_rc(&server, &heidi, &generated), 0, "nothing refused changed it");
}

#[test]
fn password_modify_is_advertised_and_refuses_malformed_values() {
    let server = Server::start();
    let mut anonymous = connect_url(&server.url());
    let (entries, _) = anonymous
        .search("", Scope::Base, "(objectClass=*)", vec!["supportedExtension"])
        .expect("search")
        .success()
        .expect("root DSE");
    let dse = SearchEntry::construct(entries.into_iter().next().expect("root DSE"));
    assert!(dse.attrs["supportedExtension"].iter().any(|oid| oid == PASSWORD_MODIFY_OID), "{dse:?}");
    let mut bob = bound(&server, BOB, "password");
    for bad in [&[0x04, 0x00][..], &[0x30, 0x02, 0x83, 0x00], &[0x30, 0x03, 0x80, 0x05, 0x00]] {
        let exop = Exop { name: Some(PASSWORD_MODIFY_OID.to_string()), val: Some(bad.to_vec()) };
        let result = bob.extended(exop).expect("extended").1;
        assert_eq!(result.rc, 2, "{bad:02x?}: {result:?}");
    }
    assert_eq!(bind_rc(&server, BOB, "password"), 0, "bob's password is untouched");
}

/// The Python used for the python3-ldap3 test: the system's, where apt installs the module.
const PYTHON: &str = "/usr/bin/python3";

#[test]
fn password_modify_with_python_ldap3() {
    let check = std::process::Command::new(PYTHON).args(["-c", "import ldap3"]).output();
    let ok = check.as_ref().is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{PYTHON} cannot import ldap3: install it with `apt-get install -y python3-ldap3` ({check:?})"
    );
    let server = Server::start();
    let mut root = admin(&server);
    add_person(&mut root, "ivan", &["ivan-old"]);
    let script = r#"
import sys, ldap3
host, port = sys.argv[1].rsplit(":", 1)
user = sys.argv[2]
server = ldap3.Server(host, port=int(port), get_info=ldap3.NONE)
conn = ldap3.Connection(server, user=user, password="ivan-old", auto_bind=True, raise_exceptions=True)
assert conn.extend.standard.modify_password(user, "ivan-old", "ivan-new") is True
conn.unbind()
admin = ldap3.Connection(server, user=sys.argv[3], password=sys.argv[4], auto_bind=True, raise_exceptions=True)
generated = admin.extend.standard.modify_password(user)
print(generated if isinstance(generated, str) else generated.decode())
"#;
    let output = std::process::Command::new(PYTHON)
        .args(["-c", script, &server.addr.to_string(), &dn_of("ivan"), ADMIN_DN, ADMIN_PW])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(stdout.len(), 16, "a generated password: {stdout:?}");
    assert_eq!(bind_rc(&server, &dn_of("ivan"), &stdout), 0);
    assert_eq!(bind_rc(&server, &dn_of("ivan"), "ivan-new"), 49);
    assert_eq!(bind_rc(&server, &dn_of("ivan"), "ivan-old"), 49);
}

#[test]
fn import_stores_userpassword_as_the_file_holds_it() {
    let mut server = Server::start();
    server.stop();
    let scratch = tempfile::tempdir().expect("tempdir");
    let ldif = format!(
        "dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: Example\n\n\
         dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n\n\
         dn: {judy}\nobjectClass: inetOrgPerson\nuid: judy\ncn: judy\nsn: judy\nuserPassword: judy-secret\n",
        judy = dn_of("judy"),
    );
    let file = scratch.path().join("in.ldif");
    std::fs::write(&file, ldif).expect("write LDIF");
    let data = scratch.path().join("data");
    let output = std::process::Command::new(crate::harness::binary())
        .arg("import")
        .arg("--config")
        .arg(server.config_path())
        .arg("--data-dir")
        .arg(&data)
        .arg(&file)
        .output()
        .expect("run import");
    assert!(output.status.success(), "{}", crate::harness::output_text(&output));
    server.data_dir = data;
    server.restart();
    assert_eq!(stored(&server, &dn_of("judy")), vec!["judy-secret".to_string()], "offline paths never hash");
    assert_eq!(bind_rc(&server, &dn_of("judy"), "judy-secret"), 0);
}

#[test]
fn the_hash_costs_are_settable_and_refused_out_of_range() {
    // argon2id with 8 MiB and one pass, instead of OWASP's 19 MiB and two.
    let server = Server::start_with_config(&format!(
        "password_argon2_m_kib = 8192\npassword_argon2_t = 1\n{TEST_CONFIG}"
    ));
    let mut root = admin(&server);
    add_person(&mut root, "dora", &["dora-secret"]);
    let values = stored(&server, &dn_of("dora"));
    assert!(values.iter().all(|v| v.starts_with("{ARGON2}$argon2id$v=19$m=8192,t=1,p=1$")), "{values:?}");
    assert_eq!(bind_rc(&server, &dn_of("dora"), "dora-secret"), 0);
    assert_eq!(bind_rc(&server, &dn_of("dora"), "wrong"), 49);
    drop(server);

    // PBKDF2-SHA512 with 20,000 rounds, through Password Modify.
    let server = Server::start_with_config(&format!(
        "password_scheme = \"{{PBKDF2-SHA512}}\"\npassword_pbkdf2_rounds = 20000\n{TEST_CONFIG}"
    ));
    let (code, out) = ldappasswd(&server, &["-D", ADMIN_DN, "-w", ADMIN_PW, "-s", "bob-new", BOB]);
    assert_eq!(code, 0, "{out}");
    let values = stored(&server, BOB);
    assert!(values.iter().all(|v| v.starts_with("{PBKDF2-SHA512}20000$")), "{values:?}");
    assert_eq!(bind_rc(&server, BOB, "bob-new"), 0);

    // Out of range: the start refuses, naming the key.
    let dir = tempfile::tempdir().unwrap();
    for (line, key) in [
        ("password_argon2_m_kib = 4", "password_argon2_m_kib"),
        ("password_pbkdf2_rounds = 10", "password_pbkdf2_rounds"),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, format!("{line}\n{TEST_CONFIG}")).unwrap();
        let output = std::process::Command::new(crate::harness::binary())
            .args(["serve", "--config"])
            .arg(&path)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .output()
            .unwrap();
        assert!(!output.status.success());
        assert!(
            String::from_utf8_lossy(&output.stderr).contains(key),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
