//! OpenLDAP's command-line tools against the server: ldapsearch (LDIF output, scopes, errors,
//! size limit, unknown critical and non-critical controls), ldapadd from stdin, ldapmodify,
//! ldapmodrdn, ldapdelete, ldapcompare and ldapwhoami, checking both their output and their
//! exit codes (the tools exit with the LDAP resultCode).

use std::collections::{BTreeMap, BTreeSet};

use crate::harness::{tool, Server, ADMIN_DN, ADMIN_PW, BASE};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const GROUPS: &str = "ou=groups,dc=example,dc=com";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const STAFF: &str = "cn=staff,ou=groups,dc=example,dc=com";

/// One LDIF record: its DN and its attributes (names lowercased) with their values.
#[derive(Debug, PartialEq, Eq)]
struct Record {
    dn: String,
    attrs: BTreeMap<String, BTreeSet<String>>,
}

impl Record {
    fn values(&self, attr: &str) -> BTreeSet<String> {
        self.attrs.get(&attr.to_ascii_lowercase()).cloned().unwrap_or_default()
    }
}

/// Runs the tools against one server, with the options every call needs: simple auth, the
/// server's URI, and libldap timeouts so that a server that never answers fails the test
/// (`timeout`: per synchronous call; `nettimeout`: connecting).
struct Tools {
    url: String,
}

/// (exit code, stdout, stderr).
type Outcome = (i32, String, String);

impl Tools {
    fn new(server: &Server) -> Self {
        Self { url: server.url() }
    }

    fn run(&self, name: &str, bind: Option<(&str, &str)>, args: &[&str], stdin: Option<&str>) -> Outcome {
        let mut all = vec!["-x", "-H", &self.url, "-o", "timeout=30", "-o", "nettimeout=10"];
        if let Some((dn, password)) = bind {
            all.extend(["-D", dn, "-w", password]);
        }
        all.extend_from_slice(args);
        tool(name, &all, stdin)
    }

    fn anonymous(&self, name: &str, args: &[&str]) -> Outcome {
        self.run(name, None, args, None)
    }

    fn admin(&self, name: &str, args: &[&str], stdin: Option<&str>) -> Outcome {
        self.run(name, Some((ADMIN_DN, ADMIN_PW)), args, stdin)
    }

    /// `ldapsearch -LLL` (unwrapped) as anonymous; asserts success and parses the LDIF.
    fn search(&self, base: &str, scope: &str, filter: &str, attrs: &[&str]) -> Vec<Record> {
        let (code, out, err) = self.ldapsearch(None, base, scope, filter, attrs, &[]);
        assert_eq!(code, 0, "ldapsearch -b {base} -s {scope} {filter}: {err}");
        parse_ldif(&out)
    }

    fn ldapsearch(
        &self,
        bind: Option<(&str, &str)>,
        base: &str,
        scope: &str,
        filter: &str,
        attrs: &[&str],
        extra: &[&str],
    ) -> Outcome {
        let mut args = vec!["-LLL", "-o", "ldif_wrap=no", "-b", base, "-s", scope];
        args.extend_from_slice(extra);
        args.push(filter);
        args.extend_from_slice(attrs);
        self.run("ldapsearch", bind, &args, None)
    }

    fn dns(&self, base: &str, scope: &str, filter: &str) -> BTreeSet<String> {
        let records = self.search(base, scope, filter, &["1.1"]);
        records.into_iter().map(|r| r.dn.to_ascii_lowercase()).collect()
    }

    /// The one entry at `dn`, read as the admin (so nothing is hidden); None if missing.
    fn read(&self, dn: &str) -> Option<Record> {
        let admin = Some((ADMIN_DN, ADMIN_PW));
        let (code, out, err) = self.ldapsearch(admin, dn, "base", "(objectClass=*)", &[], &[]);
        if code == 32 {
            return None;
        }
        assert_eq!(code, 0, "read {dn}: {err}");
        let mut records = parse_ldif(&out);
        assert_eq!(records.len(), 1, "read {dn}: {out}");
        records.pop()
    }
}

/// Parses `ldapsearch -LLL -o ldif_wrap=no` output. Base64 values (`attr:: ...`) are kept
/// as `::` plus the base64 text; none of the values these tests check needs it.
fn parse_ldif(text: &str) -> Vec<Record> {
    let mut records = Vec::new();
    for block in text.split("\n\n").map(str::trim).filter(|b| !b.is_empty()) {
        let mut lines = block.lines();
        let first = lines.next().unwrap_or_default();
        let dn = first
            .strip_prefix("dn: ")
            .unwrap_or_else(|| panic!("record does not start with a DN: {block}"))
            .to_string();
        let mut attrs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in lines {
            let (name, value) = line.split_once(':').unwrap_or_else(|| panic!("bad line {line:?}"));
            let value = match value.strip_prefix(':') {
                Some(b64) => format!("::{}", b64.trim_start()),
                None => value.strip_prefix(' ').unwrap_or(value).to_string(),
            };
            attrs.entry(name.to_ascii_lowercase()).or_default().insert(value);
        }
        records.push(Record { dn, attrs });
    }
    records
}

fn sorted(values: &[&str]) -> BTreeSet<String> {
    values.iter().map(|v| v.to_string()).collect()
}

#[test]
fn ldapsearch_prints_ldif() {
    let server = Server::start();
    let tools = Tools::new(&server);
    let all = tools.dns(BASE, "sub", "(objectClass=*)");
    assert_eq!(all, sorted(&[BASE, PEOPLE, GROUPS, ALICE, BOB, STAFF]));
    assert_eq!(tools.dns(BASE, "one", "(objectClass=*)"), sorted(&[PEOPLE, GROUPS]));
    assert_eq!(tools.dns(PEOPLE, "base", "(objectClass=*)"), sorted(&[PEOPLE]));
    assert_eq!(tools.dns(BASE, "sub", "(&(objectClass=person)(cn=*Build*))"), sorted(&[BOB]));

    let (code, out, err) = tools.ldapsearch(None, BASE, "sub", "(uid=alice)", &["cn", "mail"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(&format!("dn: {ALICE}\n")), "{out}");
    let records = parse_ldif(&out);
    let expected = Record {
        dn: ALICE.to_string(),
        attrs: BTreeMap::from([
            ("cn".to_string(), sorted(&["Alice Liddell"])),
            ("mail".to_string(), sorted(&["alice@example.com"])),
        ]),
    };
    assert_eq!(records, vec![expected]);

    // All user attributes, but no userPassword for anonymous.
    let records = tools.search(BOB, "base", "(objectClass=*)", &[]);
    assert_eq!(records.len(), 1);
    let bob = &records[0];
    assert_eq!(bob.values("objectClass").len(), 4, "{bob:?}");
    assert_eq!(bob.values("sn"), sorted(&["Builder"]));
    assert!(bob.values("userPassword").is_empty(), "{bob:?}");

    // Operational attributes on request; -A gives names without values.
    let records = tools.search(GROUPS, "base", "(objectClass=*)", &["+"]);
    assert_eq!(records[0].values("hasSubordinates"), sorted(&["TRUE"]));
    assert_eq!(records[0].values("entryDN"), sorted(&[GROUPS]));
    let (code, out, err) = tools.ldapsearch(None, ALICE, "base", "(objectClass=*)", &["sn"], &["-A"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("dn: {ALICE}\nsn:"), "{out}");
}

/// `ldapsearch -s children` (scope 3, OpenLDAP's subordinate subtree): every entry below
/// the base at any depth, never the base itself, as slapd answers it.
#[test]
fn ldapsearch_children_scope() {
    let server = Server::start();
    let tools = Tools::new(&server);
    let laptop = format!("cn=laptop,{ALICE}");
    let disk = format!("cn=disk,{laptop}");
    let ldif = format!(
        "dn: {laptop}\nobjectClass: device\ncn: laptop\n\ndn: {disk}\nobjectClass: device\ncn: disk\n"
    );
    let (code, out, err) = tools.admin("ldapadd", &[], Some(&ldif));
    assert_eq!(code, 0, "{out} {err}");
    let everything = "(objectClass=*)";
    let below_base = sorted(&[PEOPLE, GROUPS, ALICE, BOB, STAFF, &laptop, &disk]);
    assert_eq!(tools.dns(BASE, "children", everything), below_base);
    assert_eq!(tools.dns(PEOPLE, "children", everything), sorted(&[ALICE, BOB, &laptop, &disk]));
    assert_eq!(tools.dns(ALICE, "children", everything), sorted(&[&laptop, &disk]));
    assert_eq!(tools.dns(&disk, "children", everything), sorted(&[]));
    assert_eq!(tools.dns(PEOPLE, "children", "(cn=disk)"), sorted(&[&disk]));
    assert_eq!(tools.dns(&laptop, "children", "(cn=laptop)"), sorted(&[]));
}

#[test]
fn ldapsearch_errors_and_limits() {
    let server = Server::start();
    let tools = Tools::new(&server);
    let base = "ou=nowhere,dc=example,dc=com";
    let (code, out, err) = tools.ldapsearch(None, base, "sub", "(objectClass=*)", &[], &[]);
    assert_eq!(code, 32, "{out} {err}");
    assert!(err.contains("No such object"), "{err}");
    assert!(err.contains(&format!("Matched DN: {BASE}")), "{err}");

    let (code, out, err) = tools.ldapsearch(None, BASE, "sub", "(objectClass=*)", &["1.1"], &["-z", "2"]);
    assert_eq!(code, 4, "{out} {err}");
    assert_eq!(parse_ldif(&out).len(), 2, "{out}");
    assert!(err.contains("Size limit exceeded"), "{err}");

    let (code, _, err) = tools.ldapsearch(None, BASE, "sub", "(objectClass=*)", &["1.1"], &["-z", "6"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn unknown_controls() {
    let server = Server::start();
    let tools = Tools::new(&server);
    // RFC 4511 §4.1.11: a critical control the server doesn't know fails the operation.
    let extra = ["-E", "!1.2.3.4.5"];
    let (code, out, err) = tools.ldapsearch(None, BASE, "sub", "(uid=alice)", &["1.1"], &extra);
    assert_eq!(code, 12, "critical unknown control: {out} {err}");
    assert!(parse_ldif(&out).is_empty(), "entries despite the refusal: {out}");
    // A non-critical one is ignored.
    let extra = ["-E", "1.2.3.4.5"];
    let (code, out, err) = tools.ldapsearch(None, BASE, "sub", "(uid=alice)", &["1.1"], &extra);
    assert_eq!(code, 0, "non-critical unknown control: {err}");
    let records = parse_ldif(&out);
    assert_eq!(records.len(), 1, "{out}");
    assert_eq!(records[0].dn, ALICE);
    // On a write too: the refused modify changes nothing.
    let ldif = format!("dn: {ALICE}\nchangetype: modify\nreplace: sn\nsn: Changed\n");
    let (code, out, err) = tools.admin("ldapmodify", &["-e", "!1.2.3.4.5"], Some(&ldif));
    assert_eq!(code, 12, "critical unknown control on modify: {out} {err}");
    assert_eq!(tools.read(ALICE).expect("alice").values("sn"), sorted(&["Liddell"]));
}

#[test]
fn ldapadd_reads_several_entries_from_stdin() {
    let server = Server::start();
    let tools = Tools::new(&server);
    let ldif = "\
dn: ou=cli,dc=example,dc=com
objectClass: top
objectClass: organizationalUnit
ou: cli
description: added by ldapadd

dn: uid=carol,ou=cli,dc=example,dc=com
objectClass: inetOrgPerson
uid: carol
cn: Carol Cli
sn: Cli

dn: uid=dave,ou=cli,dc=example,dc=com
objectClass: inetOrgPerson
uid: dave
cn: Dave Cli
sn: Cli
";
    let (code, out, err) = tools.admin("ldapadd", &[], Some(ldif));
    assert_eq!(code, 0, "{out} {err}");
    assert_eq!(out.matches("adding new entry").count(), 3, "{out}");
    let cli = "ou=cli,dc=example,dc=com";
    let carol = "uid=carol,ou=cli,dc=example,dc=com";
    let dave = "uid=dave,ou=cli,dc=example,dc=com";
    assert_eq!(tools.dns(cli, "sub", "(objectClass=*)"), sorted(&[cli, carol, dave]));
    assert_eq!(tools.dns(BASE, "sub", "(sn=cli)"), sorted(&[carol, dave]));
    let record = tools.read(cli).expect("ou=cli");
    assert_eq!(record.values("description"), sorted(&["added by ldapadd"]));

    // The same input again: the first entry already exists.
    let (code, _, err) = tools.admin("ldapadd", &[], Some(ldif));
    assert_eq!(code, 68, "{err}");
    assert!(err.contains("Already exists"), "{err}");
    // Anonymous may not add.
    let one = "dn: ou=anon,dc=example,dc=com\nobjectClass: organizationalUnit\nou: anon\n";
    let (code, _, err) = tools.run("ldapadd", None, &[], Some(one));
    assert_eq!(code, 8, "{err}");
    assert!(tools.read("ou=anon,dc=example,dc=com").is_none());
}

#[test]
fn ldapmodify_adds_replaces_and_deletes() {
    let server = Server::start();
    let tools = Tools::new(&server);
    let ldif = format!(
        "\
dn: {ALICE}
changetype: modify
add: description
description: one
description: two
-
replace: sn
sn: Hargreaves
-
delete: givenName
-
delete: mail
mail: alice@example.com
-
add: mail
mail: alice@wonderland.example
"
    );
    let (code, out, err) = tools.admin("ldapmodify", &[], Some(&ldif));
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains(&format!("modifying entry \"{ALICE}\"")), "{out}");
    let alice = tools.read(ALICE).expect("alice");
    assert_eq!(alice.values("description"), sorted(&["one", "two"]));
    assert_eq!(alice.values("sn"), sorted(&["Hargreaves"]));
    assert!(alice.values("givenName").is_empty(), "{alice:?}");
    assert_eq!(alice.values("mail"), sorted(&["alice@wonderland.example"]));
    assert_eq!(alice.values("cn"), sorted(&["Alice Liddell"]));

    // Deleting a value that isn't there fails and changes nothing.
    let ldif =
        format!("dn: {BOB}\nchangetype: modify\nreplace: sn\nsn: X\n-\ndelete: mail\nmail: no@example.com\n");
    let (code, _, err) = tools.admin("ldapmodify", &[], Some(&ldif));
    assert_eq!(code, 16, "{err}");
    assert_eq!(tools.read(BOB).expect("bob").values("sn"), sorted(&["Builder"]));

    // Other change types through ldapmodify: add, then delete.
    let temp = "cn=temp,dc=example,dc=com";
    let ldif = format!(
        "dn: {temp}\nchangetype: add\nobjectClass: device\ncn: temp\n\ndn: {temp}\nchangetype: delete\n"
    );
    let (code, out, err) = tools.admin("ldapmodify", &[], Some(&ldif));
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("adding new entry") && out.contains("deleting entry"), "{out}");
    assert!(tools.read(temp).is_none());
}

#[test]
fn ldapmodrdn_renames_and_moves() {
    let server = Server::start();
    let tools = Tools::new(&server);
    // -r: the old RDN value goes.
    let (code, out, err) = tools.admin("ldapmodrdn", &["-r", BOB, "uid=robert"], None);
    assert_eq!(code, 0, "{out} {err}");
    let robert = "uid=robert,ou=people,dc=example,dc=com";
    assert!(tools.read(BOB).is_none());
    assert_eq!(tools.read(robert).expect("robert").values("uid"), sorted(&["robert"]));

    // Without -r it stays.
    let (code, _, err) = tools.admin("ldapmodrdn", &[ALICE, "uid=alicia"], None);
    assert_eq!(code, 0, "{err}");
    let alicia = "uid=alicia,ou=people,dc=example,dc=com";
    assert_eq!(tools.read(alicia).expect("alicia").values("uid"), sorted(&["alice", "alicia"]));

    // -s: a new superior.
    let (code, _, err) = tools.admin("ldapmodrdn", &["-s", GROUPS, robert, "uid=robert"], None);
    assert_eq!(code, 0, "{err}");
    let moved = "uid=robert,ou=groups,dc=example,dc=com";
    assert!(tools.read(robert).is_none());
    assert!(tools.read(moved).is_some());
    assert_eq!(tools.dns(GROUPS, "one", "(objectClass=*)"), sorted(&[STAFF, moved]));
    assert_eq!(tools.dns(PEOPLE, "one", "(objectClass=*)"), sorted(&[alicia]));

    // Onto an existing name, and of a missing entry.
    let (code, _, err) = tools.admin("ldapmodrdn", &["-r", moved, "cn=staff"], None);
    assert_eq!(code, 68, "{err}");
    let (code, _, err) = tools.admin("ldapmodrdn", &["-r", BOB, "uid=x"], None);
    assert_eq!(code, 32, "{err}");
}

#[test]
fn ldapdelete_exit_codes() {
    let server = Server::start();
    let tools = Tools::new(&server);
    let (code, _, err) = tools.anonymous("ldapdelete", &[BOB]);
    assert_eq!(code, 8, "anonymous: {err}");
    let (code, _, err) = tools.run("ldapdelete", Some((ALICE, "password")), &[BOB], None);
    assert_eq!(code, 50, "alice: {err}");
    assert!(tools.read(BOB).is_some());

    let (code, out, err) = tools.admin("ldapdelete", &[BOB], None);
    assert_eq!(code, 0, "{out} {err}");
    assert!(tools.read(BOB).is_none());
    let (code, _, err) = tools.admin("ldapdelete", &[BOB], None);
    assert_eq!(code, 32, "{err}");
    assert!(err.contains("No such object"), "{err}");
    let (code, _, err) = tools.admin("ldapdelete", &[PEOPLE], None);
    assert_eq!(code, 66, "{err}");
    assert!(tools.read(PEOPLE).is_some());
    // Several DNs in one call.
    let (code, _, err) = tools.admin("ldapdelete", &[ALICE, STAFF], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(tools.dns(BASE, "sub", "(objectClass=*)"), sorted(&[BASE, PEOPLE, GROUPS]));
}

#[test]
fn ldapcompare_exit_codes() {
    let server = Server::start();
    let tools = Tools::new(&server);
    let (code, out, err) = tools.anonymous("ldapcompare", &[ALICE, "cn:Alice Liddell"]);
    assert_eq!((code, out.trim()), (6, "TRUE"), "{err}");
    let (code, out, err) = tools.anonymous("ldapcompare", &[ALICE, "cn:ALICE LIDDELL"]);
    assert_eq!((code, out.trim()), (6, "TRUE"), "{err}");
    let (code, out, err) = tools.anonymous("ldapcompare", &[ALICE, "sn:Builder"]);
    assert_eq!((code, out.trim()), (5, "FALSE"), "{err}");
    let (code, _, err) = tools.anonymous("ldapcompare", &[ALICE, "description:x"]);
    assert_eq!(code, 16, "{err}");
    let (code, _, err) = tools.anonymous("ldapcompare", &["uid=x,ou=people,dc=example,dc=com", "cn:x"]);
    assert_eq!(code, 32, "{err}");
    // Base64 assertion (cn::QWxpY2UgTGlkZGVsbA== is "Alice Liddell").
    let (code, out, err) = tools.anonymous("ldapcompare", &[ALICE, "cn::QWxpY2UgTGlkZGVsbA=="]);
    assert_eq!((code, out.trim()), (6, "TRUE"), "{err}");
}

#[test]
fn ldapwhoami_identities() {
    let server = Server::start();
    let tools = Tools::new(&server);
    let (code, out, err) = tools.anonymous("ldapwhoami", &[]);
    assert_eq!((code, out.trim()), (0, "anonymous"), "{err}");
    let (code, out, err) = tools.admin("ldapwhoami", &[], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim().to_ascii_lowercase(), format!("dn:{ADMIN_DN}"));
    for dn in [ALICE, BOB] {
        let (code, out, err) = tools.run("ldapwhoami", Some((dn, "password")), &[], None);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.trim().to_ascii_lowercase(), format!("dn:{dn}"));
    }
    let (code, out, err) = tools.run("ldapwhoami", Some((ALICE, "wrong")), &[], None);
    assert_eq!(code, 49, "{out} {err}");
    assert!(err.contains("Invalid credentials"), "{err}");
}
