//! Proxied authorization (RFC 4370) against slapd 2.5: slapd with `authz-policy to` (then
//! `from`), ferrodir with `[sasl] authz_policy` the same, the same people with authzTo and
//! authzFrom rules of every form added over LDAP, the same access rules (self write,
//! everyone read), then one script of ldapwhoami and ldapmodify runs with `-e authzid=`
//! on both. Every step's exit code and Who am I? answer is compared: who may act as whom,
//! and that the proxied identity's access rules apply.

use std::process::{Command, Stdio};

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};

const PEOPLE: &str = "ou=people,dc=example,dc=com";

fn dn(uid: &str) -> String {
    format!("uid={uid},{PEOPLE}")
}

/// Runs `tool` bound as `who` (None: anonymous): (exit code, standard output).
fn run(
    server: &Server,
    tool: &str,
    who: Option<(&str, &str)>,
    args: &[&str],
    stdin: Option<&str>,
) -> (i32, String) {
    use std::io::Write;
    let url = format!("ldap://{}", server.addr);
    let mut command = Command::new(tool);
    command.args(["-x", "-H", &url]);
    if let Some((dn, password)) = who {
        command.args(["-D", dn, "-w", password]);
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {tool} (ldap-utils): {e}"));
    if let Some(input) = stdin {
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write stdin");
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().expect("wait");
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).trim().to_lowercase())
}

fn populate(server: &Server) {
    let people: [(&str, &[&str]); 6] = [
        ("alice", &["authzFrom: dn:uid=p4,ou=people,dc=example,dc=com"]),
        ("bob", &[]),
        ("p1", &["authzTo: dn:uid=alice,ou=people,dc=example,dc=com"]),
        ("p2", &["authzTo: dn.regex:^uid=[^,]*,ou=people,dc=example,dc=com$"]),
        ("p3", &["authzTo: ldap:///ou=people,dc=example,dc=com??one?(sn=Liddell)"]),
        ("p4", &["authzTo: dn.subtree:ou=nowhere,dc=example,dc=com"]),
    ];
    let mut ldif = format!(
        "dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: x\n\n\
         dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n\n"
    );
    for (uid, rules) in people {
        let sn = if uid == "alice" { "Liddell" } else { uid };
        ldif.push_str(&format!(
            "dn: {}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid}\nsn: {sn}\nuserPassword: pw-{uid}\n",
            dn(uid)
        ));
        for rule in rules {
            ldif.push_str(rule);
            ldif.push('\n');
        }
        ldif.push('\n');
    }
    let (rc, _) = run(server, "ldapadd", Some((MANAGER_DN, MANAGER_PW)), &[], Some(&ldif));
    assert_eq!(rc, 0, "populate {}", server.name);
}

fn script(server: &Server) -> Vec<String> {
    let mut out = Vec::new();
    let alice = format!("dn:{}", dn("alice"));
    let bob = format!("dn:{}", dn("bob"));
    let as_user = |uid: &'static str| {
        Some((
            Box::leak(dn(uid).into_boxed_str()) as &str,
            Box::leak(format!("pw-{uid}").into_boxed_str()) as &str,
        ))
    };
    for uid in ["p1", "p2", "p3", "p4", "bob"] {
        for (name, target) in [("alice", alice.as_str()), ("bob", bob.as_str())] {
            let authzid = format!("!authzid={target}");
            let (rc, answer) = run(server, "ldapwhoami", as_user(uid), &["-e", &authzid], None);
            out.push(format!("{uid} as {name}: rc={rc} {answer}"));
        }
    }
    let (rc, answer) = run(
        server,
        "ldapwhoami",
        Some((MANAGER_DN, MANAGER_PW)),
        &["-e", &format!("!authzid={alice}")],
        None,
    );
    out.push(format!("manager as alice: rc={rc} {answer}"));
    let (rc, answer) = run(server, "ldapwhoami", None, &["-e", &format!("!authzid={alice}")], None);
    out.push(format!("anonymous as alice: rc={rc} {answer}"));
    let (rc, answer) = run(server, "ldapwhoami", as_user("p2"), &["-e", "!authzid="], None);
    out.push(format!("p2 as anonymous: rc={rc} {answer}"));
    let (rc, answer) = run(server, "ldapwhoami", as_user("p2"), &["-e", "!authzid=dn:not a dn"], None);
    out.push(format!("p2 as a bad dn: rc={rc} {answer}"));
    // The access rules are the proxied identity's: alice may write her own entry.
    let change =
        format!("dn: {}\nchangetype: modify\nreplace: description\ndescription: by proxy\n", dn("alice"));
    let (rc, _) = run(server, "ldapmodify", as_user("p1"), &[], Some(&change));
    out.push(format!("p1 writes alice: rc={rc}"));
    let (rc, _) =
        run(server, "ldapmodify", as_user("p1"), &["-e", &format!("!authzid={alice}")], Some(&change));
    out.push(format!("p1 as alice writes alice: rc={rc}"));
    let (rc, read) = run(
        server,
        "ldapsearch",
        None,
        &["-LLL", "-b", &dn("alice"), "-s", "base", "description", "modifiersName"],
        None,
    );
    let mut lines: Vec<&str> = read.lines().collect();
    lines.sort_unstable();
    out.push(format!("alice afterwards: rc={rc} {}", lines.join(" | ")));
    out
}

fn compare(policy: &str) {
    let access = ["access to * by self write by * read".to_string()];
    let slapd = servers::start_slapd_with_access_and_globals(&access, &format!("authz-policy {policy}\n"));
    let rules = "[[access_rules]]\nto = '*'\nby = ['self write', '* read']\n";
    let ferrodir =
        servers::start_ferrodir_with(None, &format!("{rules}[sasl]\nauthz_policy = \"{policy}\"\n"));
    populate(&slapd);
    populate(&ferrodir);
    let theirs = script(&slapd);
    let ours = script(&ferrodir);
    for (i, (a, b)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(
            b, a,
            "authz-policy {policy}: step {i} differs (slapd's on the right); slapd's run: {theirs:#?}"
        );
    }
    // The reference both allowed and denied: the script tests something.
    assert!(theirs.iter().any(|l| l.contains("denied (123)")), "{theirs:#?}");
    assert!(theirs.iter().any(|l| l.contains("as alice: rc=0 dn:uid=alice")), "{theirs:#?}");
}

#[test]
fn proxied_authorization_under_authz_policy_to_matches_slapd() {
    compare("to");
}

#[test]
fn proxied_authorization_under_authz_policy_from_matches_slapd() {
    compare("from");
}

/// The control's refusals, sent by python ldap3 (which can put it on a Bind): critical on a
/// Bind, twice, without a value, with an authzId that is no DN.
const REFUSALS: &str = r#"
import sys, ldap3
server = ldap3.Server(sys.argv[1])
manager = ("cn=Manager,dc=example,dc=com", "secret")
oid = "2.16.840.1.113730.3.4.18"
c = ldap3.Connection(server, user=manager[0], password=manager[1], raise_exceptions=False)
c.open()
c.bind(controls=[(oid, True, b"dn:cn=Manager,dc=example,dc=com")])
print("bind", c.result["result"])
c = ldap3.Connection(server, user=manager[0], password=manager[1], raise_exceptions=False)
c.bind()
for name, controls in [
    ("twice", [(oid, True, b"dn:cn=a,dc=example,dc=com"), (oid, True, b"dn:cn=b,dc=example,dc=com")]),
    ("no value", [(oid, True, None)]),
    ("not a dn", [(oid, True, b"xx:garbage")]),
]:
    c.search("dc=example,dc=com", "(objectClass=*)", search_scope=ldap3.BASE, controls=controls)
    print(name, c.result["result"], c.result["message"])
"#;

#[test]
fn the_proxy_controls_refusals_match_slapd() {
    let slapd = servers::start_slapd_with_access_and_globals(&[], "authz-policy to\n");
    let ferrodir = servers::start_ferrodir_with(None, "[sasl]\nauthz_policy = \"to\"\n");
    let answers = |server: &Server| {
        let output = Command::new("/usr/bin/python3")
            .args(["-c", REFUSALS, &server.addr.to_string()])
            .output()
            .expect("python3 with python3-ldap3");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let theirs = answers(&slapd);
    assert!(theirs.contains("bind 12") && theirs.contains("not a dn 123"), "{theirs}");
    assert_eq!(answers(&ferrodir), theirs, "slapd's on the right");
}

/// Who am I? answers the DN as slapd does: types in lower case, no spaces around the
/// separators, special characters as `\XX`, values as the client wrote them.
#[test]
fn who_am_i_answers_the_dn_as_slapd_writes_it() {
    let slapd = servers::start_slapd(None);
    let ferrodir = servers::start_ferrodir(None);
    let answers = |server: &Server| -> Vec<String> {
        let ldif = format!(
            "dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: x\n\n\
             dn: cn=Ops\\, Admin,{SUFFIX}\nobjectClass: person\ncn: Ops, Admin\nsn: x\nuserPassword: pw\n"
        );
        assert_eq!(run(server, "ldapadd", Some((MANAGER_DN, MANAGER_PW)), &[], Some(&ldif)).0, 0);
        [
            ("CN=Manager,DC=Example,DC=Com", MANAGER_PW),
            ("CN=Ops\\, Admin, DC=example,DC=com", "pw"),
            ("cn=Ops\\2C Admin,dc=example,dc=com", "pw"),
        ]
        .iter()
        .map(|(dn, password)| {
            let url = format!("ldap://{}", server.addr);
            let output =
                Command::new("ldapwhoami").args(["-x", "-H", &url, "-D", dn, "-w", password]).output();
            let output = output.expect("ldapwhoami");
            format!("{dn}: {}", String::from_utf8_lossy(&output.stdout).trim())
        })
        .collect()
    };
    let theirs = answers(&slapd);
    assert!(theirs.iter().any(|l| l.ends_with("dn:cn=Ops\\2C Admin,dc=example,dc=com")), "{theirs:#?}");
    assert_eq!(answers(&ferrodir), theirs, "slapd's on the right");
}
