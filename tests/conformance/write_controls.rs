//! The assertion (RFC 4528), pre-read and post-read (RFC 4527), relax rules and
//! dontUseCopy (RFC 6171) controls against slapd 2.5: the same entries added over LDAP on
//! both servers, then the same script of OpenLDAP tool runs with `-e`/`-E` on both. Every
//! step's exit code (the LDAP result code) is compared, and the entries the pre-read and
//! post-read controls return (their attribute lines, sorted: the servers may order
//! attributes differently). The reference is slapd's answers, recorded in the same run.

use std::process::{Command, Stdio};

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};

const PEOPLE: &str = "ou=people,dc=example,dc=com";

/// Runs `tool` as the manager with `args` and `stdin`: (exit code, the read-entry blocks).
fn run(server: &Server, tool: &str, args: &[&str], stdin: Option<&str>) -> (i32, Vec<String>) {
    use std::io::Write;
    let url = format!("ldap://{}", server.addr);
    let mut child = Command::new(tool)
        .args(["-x", "-H", &url, "-D", MANAGER_DN, "-w", MANAGER_PW])
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
    let text = String::from_utf8_lossy(&output.stdout);
    (output.status.code().unwrap_or(-1), read_entries(&text))
}

/// The `# ==> preread` / `# ==> postread` blocks of a tool's output, each as its kind, DN
/// and sorted attribute lines.
fn read_entries(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        if let Some(kind) = line.strip_prefix("# ==> ") {
            current = Some((kind.to_string(), Vec::new()));
        } else if line.starts_with("# <== ") {
            if let Some((kind, mut lines)) = current.take() {
                lines.sort();
                out.push(format!("{kind}: {}", lines.join(" | ")));
            }
        } else if let Some((_, lines)) = current.as_mut() {
            if !line.is_empty() {
                lines.push(line.to_string());
            }
        }
    }
    out
}

fn populate(server: &Server) {
    let ldif = format!(
        "dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: x\n\n\
         dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n\n\
         dn: uid=alice,{PEOPLE}\nobjectClass: inetOrgPerson\nuid: alice\ncn: Alice\nsn: Liddell\n\n\
         dn: uid=bob,{PEOPLE}\nobjectClass: inetOrgPerson\nuid: bob\ncn: Bob\nsn: Builder\ndescription: b\n"
    );
    let (rc, _) = run(server, "ldapadd", &[], Some(&ldif));
    assert_eq!(rc, 0, "populate {}", server.name);
}

/// One step: a name, the tool, its arguments and its input.
type Step = (&'static str, &'static str, Vec<String>, Option<String>);

fn script() -> Vec<Step> {
    let alice = format!("uid=alice,{PEOPLE}");
    let modify = |value: &str| {
        Some(format!("dn: {alice}\nchangetype: modify\nreplace: description\ndescription: {value}\n"))
    };
    let s = |items: &[&str]| items.iter().map(|i| i.to_string()).collect::<Vec<_>>();
    let t1 = format!("dn: cn=t1,{PEOPLE}\nobjectClass: person\ncn: t1\nsn: one\n");
    let rename = format!("dn: cn=t1,{PEOPLE}\nchangetype: modrdn\nnewrdn: cn=t2\ndeleteoldrdn: 1\n");
    let t2 = format!("cn=t2,{PEOPLE}");
    let migrated = format!(
        "dn: cn=m1,{PEOPLE}\nobjectClass: person\ncn: m1\nsn: mig\ncreateTimestamp: 20000101000000Z\n\
         entryUUID: 11111111-2222-3333-4444-555555555555\n"
    );
    let stamp = format!(
        "dn: cn=m1,{PEOPLE}\nchangetype: modify\nreplace: createTimestamp\ncreateTimestamp: 19990101000000Z\n"
    );
    vec![
        ("modify, assertion false", "ldapmodify", s(&["-e", "assert=(sn=Nobody)"]), modify("no")),
        ("modify, critical assertion false", "ldapmodify", s(&["-e", "!assert=(sn=Nobody)"]), modify("no")),
        (
            "modify, assertion true, reads",
            "ldapmodify",
            s(&["-e", "assert=(sn=Liddell)", "-e", "preread=description,sn", "-e", "postread=description"]),
            modify("one"),
        ),
        ("modify, pre-read of the last", "ldapmodify", s(&["-e", "!preread=description"]), modify("two")),
        (
            "search, assertion false",
            "ldapsearch",
            s(&["-b", &alice, "-s", "base", "-e", "assert=(uid=bob)", "1.1"]),
            None,
        ),
        (
            "search, assertion true",
            "ldapsearch",
            s(&["-b", &alice, "-s", "base", "-e", "assert=(uid=alice)", "1.1"]),
            None,
        ),
        (
            "subtree search, assertion on the base",
            "ldapsearch",
            s(&["-b", PEOPLE, "-e", "assert=(ou=nope)", "1.1"]),
            None,
        ),
        (
            "compare, assertion false",
            "ldapcompare",
            s(&["-e", "assert=(uid=bob)", &alice, "sn:Liddell"]),
            None,
        ),
        (
            "compare, assertion true",
            "ldapcompare",
            s(&["-e", "assert=(uid=alice)", &alice, "sn:Liddell"]),
            None,
        ),
        ("add, assertion false", "ldapadd", s(&["-e", "assert=(sn=two)"]), Some(t1.clone())),
        (
            "add, assertion true, post-read",
            "ldapadd",
            s(&["-e", "assert=(sn=one)", "-e", "postread=cn,sn"]),
            Some(t1),
        ),
        ("rename, assertion false", "ldapmodify", s(&["-e", "assert=(sn=two)"]), Some(rename.clone())),
        (
            "rename, assertion true, reads",
            "ldapmodify",
            s(&["-e", "assert=(sn=one)", "-e", "preread=cn", "-e", "postread=cn"]),
            Some(rename),
        ),
        ("delete, assertion false", "ldapdelete", s(&["-e", "assert=(sn=two)", &t2]), None),
        (
            "delete, assertion true, pre-read",
            "ldapdelete",
            s(&["-e", "assert=(sn=one)", "-e", "preread=sn,cn", &t2]),
            None,
        ),
        ("delete, already gone", "ldapdelete", s(&["-e", "assert=(sn=one)", &t2]), None),
        (
            "search, critical pre-read",
            "ldapsearch",
            s(&["-b", &alice, "-s", "base", "-e", "!preread", "1.1"]),
            None,
        ),
        (
            "search, malformed assertion",
            "ldapsearch",
            s(&["-b", &alice, "-s", "base", "-E", "1.3.6.1.1.12=:zz", "1.1"]),
            None,
        ),
        (
            "search, dontUseCopy",
            "ldapsearch",
            s(&["-b", &alice, "-s", "base", "-E", "!dontUseCopy", "1.1"]),
            None,
        ),
        ("add, operational values without relax", "ldapadd", Vec::new(), Some(migrated.clone())),
        (
            "add, operational values with relax",
            "ldapadd",
            s(&["-e", "!relax", "-e", "postread=createTimestamp,entryUUID"]),
            Some(migrated),
        ),
        ("modify createTimestamp without relax", "ldapmodify", Vec::new(), Some(stamp.clone())),
        (
            "modify createTimestamp with relax",
            "ldapmodify",
            s(&["-e", "relax", "-e", "postread=createTimestamp"]),
            Some(stamp),
        ),
    ]
}

#[test]
fn write_controls_match_slapd() {
    let slapd = servers::start_slapd(None);
    let ferrodir = servers::start_ferrodir(None);
    populate(&slapd);
    populate(&ferrodir);
    let mut theirs = Vec::new();
    let mut ours = Vec::new();
    for (name, tool, args, stdin) in script() {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (rc, reads) = run(&slapd, tool, &args, stdin.as_deref());
        theirs.push(format!("{name}: rc={rc} {reads:?}"));
        let (rc, reads) = run(&ferrodir, tool, &args, stdin.as_deref());
        ours.push(format!("{name}: rc={rc} {reads:?}"));
    }
    for (i, (a, b)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(b, a, "step {i} differs (slapd's on the right); slapd's whole run: {theirs:#?}");
    }
    // The reference refused and read: the script tests something.
    assert!(theirs.iter().filter(|line| line.contains("rc=122")).count() >= 5, "{theirs:#?}");
    assert!(theirs.iter().any(|line| line.contains("preread: dn:")), "{theirs:#?}");
}
