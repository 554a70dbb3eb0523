//! Edges where ferrodir and slapd 2.5 used to answer differently, one test per group: both
//! servers get the same small tree over LDAP, then the same steps; every step's answer
//! (result code, matchedDN, returned entries as `compare` normalises them) is compared with
//! slapd's, recorded in the same run. Where ferrodir keeps another answer on purpose, the
//! step is listed in the test's `known` list with the answer ferrodir must give and the RFC
//! reason (docs/CONFORMANCE.md, "Remaining differences"), and slapd must still answer
//! otherwise: an entry that no longer differs fails the test.
//!
//! Groups: approximate matching; Compare on computed attributes; filters on
//! subschemaSubentry and entryDN; Add of the empty DN; a Modify `add` without values; paged
//! searches of page size 0; member values in unusual DN forms and the memberOf they give;
//! memberOf without the overlay; StartTLS on ldapi without a certificate.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use ldap3::controls::RawControl;
use ldap3::{LdapConn, Scope as L3Scope, SearchResult};

use crate::catalogue::describe;
use crate::client::{Auth, Change, Client, ModOp, Reply, Request, Scope, SearchRequest};
use crate::compare::{self, Answer};
use crate::filter;
use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const GROUPS: &str = "ou=groups,dc=example,dc=com";
const BJENSEN: &str = "cn=Barbara Jensen,ou=people,dc=example,dc=com";
const JDOE: &str = "cn=John Doe,ou=people,dc=example,dc=com";
/// A DN whose RDN value holds a comma, written with the hex escape and the backslash one.
const SMITH_HEX: &str = "cn=Smith\\2C John,ou=people,dc=example,dc=com";
const SMITH_ESCAPED: &str = "cn=Smith\\, John,ou=People,dc=example,dc=com";
/// A multi-valued RDN.
const MULTI: &str = "cn=a+sn=b,ou=people,dc=example,dc=com";
/// A UUID-style RDN, as some provisioning tools name entries.
const UUID_DN: &str = "cn=0c0d2e5e-1111-2222-3333-444455556666,ou=people,dc=example,dc=com";

/// One operation of a group: a name for the report, who sends it, the request.
struct Step {
    name: String,
    anonymous: bool,
    request: Request,
}

/// A step where ferrodir answers otherwise on purpose: the answer it must give (as
/// `compare::summary` prints it) and why.
struct Known {
    step: &'static str,
    ferrodir: &'static str,
    reason: &'static str,
}

fn step(name: &str, request: Request) -> Step {
    Step { name: name.to_string(), anonymous: false, request }
}

fn anon(name: &str, request: Request) -> Step {
    Step { name: name.to_string(), anonymous: true, request }
}

fn search(base: &str, scope: Scope, filter_text: &str, attrs: &[&str]) -> Request {
    let filter = filter::parse(filter_text).unwrap_or_else(|e| panic!("filter {filter_text}: {e}"));
    Request::Search(SearchRequest {
        base: base.to_string(),
        scope,
        filter,
        attrs: attrs.iter().map(|a| a.to_string()).collect(),
        size_limit: 0,
        types_only: false,
        controls: Vec::new(),
    })
}

fn compare_req(dn: &str, attr: &str, value: &str) -> Request {
    Request::Compare { dn: dn.into(), attr: attr.into(), value: value.into() }
}

fn add(dn: &str, attrs: &[(&str, &[&str])]) -> Request {
    let attrs =
        attrs.iter().map(|(n, v)| (n.to_string(), v.iter().map(|s| s.to_string()).collect())).collect();
    Request::Add { dn: dn.into(), attrs }
}

fn change(op: ModOp, attr: &str, values: &[&str]) -> Change {
    Change { op, attr: attr.into(), values: values.iter().map(|v| v.to_string()).collect() }
}

fn connect(server: &Server, bind: bool) -> Client {
    let mut client = Client::connect(server.addr).unwrap_or_else(|e| panic!("{}: {e}", server.name));
    if bind {
        let request =
            Request::Bind { version: 3, dn: MANAGER_DN.into(), auth: Auth::Simple(MANAGER_PW.into()) };
        match client.call(&request) {
            Reply::Result(r) if r.code == 0 => {}
            other => panic!("{}: manager bind failed: {other:?}", server.name),
        }
    }
    client
}

/// Runs `steps` in order on `server`, the manager's on one connection, anonymous ones on
/// another (reopened after a transport failure).
fn run(server: &Server, steps: &[Step]) -> Vec<Answer> {
    let (mut manager, mut anonymous) = (connect(server, true), connect(server, false));
    let mut answers = Vec::new();
    for step in steps {
        let client = if step.anonymous { &mut anonymous } else { &mut manager };
        answers.push(compare::answer(&client.call(&step.request)));
        if manager.broken {
            manager = connect(server, true);
        }
        if anonymous.broken {
            anonymous = connect(server, false);
        }
    }
    answers
}

/// Adds `entries` as the manager; each must succeed (the group's data, not its subject).
fn populate(server: &Server, entries: &[Request]) {
    let mut client = connect(server, true);
    for request in entries {
        match client.call(request) {
            Reply::Result(r) if r.code == 0 => {}
            other => panic!("{}: populating {}: {other:?}", server.name, describe(request)),
        }
    }
}

/// Both servers' answers step by step; fails with the whole transcript on a difference
/// not in `known`, on a `known` answer ferrodir no longer gives, and on a `known` step
/// where slapd now agrees.
fn check(group: &str, steps: &[Step], slapd: &[Answer], ferrodir: &[Answer], known: &[Known]) {
    let mut transcript = String::new();
    let mut failures = Vec::new();
    for (step, (a, b)) in steps.iter().zip(slapd.iter().zip(ferrodir)) {
        let (sa, fa) = (compare::summary(a, &step.request), compare::summary(b, &step.request));
        let difference = compare::difference(a, b);
        let mark = if difference.is_some() { "!=" } else { "  " };
        let who = if step.anonymous { "anon" } else { "manager" };
        let _ = writeln!(
            transcript,
            "{mark} {} [{who}] {} | slapd: {sa} | ferrodir: {fa}",
            step.name,
            describe(&step.request)
        );
        match (known.iter().find(|k| k.step == step.name), difference) {
            (None, None) => {}
            (None, Some(detail)) => failures.push(format!("{}: {detail}", step.name)),
            (Some(k), None) => failures
                .push(format!("{}: now agrees with slapd, drop it from `known` ({})", step.name, k.reason)),
            (Some(k), Some(_)) if fa != k.ferrodir => failures
                .push(format!("{}: ferrodir should answer `{}` ({})", step.name, k.ferrodir, k.reason)),
            (Some(_), Some(_)) => {}
        }
    }
    for k in known.iter().filter(|k| !steps.iter().any(|s| s.name == k.step)) {
        failures.push(format!("{}: in `known`, but no such step", k.step));
    }
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("conformance-edges-{group}.txt"));
    let _ = std::fs::write(&path, &transcript);
    println!("{group}:\n{transcript}");
    assert!(failures.is_empty(), "{group}: {}\n\nwhole run:\n{transcript}", failures.join("\n"));
}

/// The tree every group starts from: people named in ordinary and unusual ways.
fn tree() -> Vec<Request> {
    vec![
        add(
            SUFFIX,
            &[("objectClass", &["dcObject", "organization"]), ("dc", &["example"]), ("o", &["Example"])],
        ),
        add(PEOPLE, &[("objectClass", &["organizationalUnit"]), ("ou", &["people"])]),
        add(GROUPS, &[("objectClass", &["organizationalUnit"]), ("ou", &["groups"])]),
        add(
            BJENSEN,
            &[
                ("objectClass", &["inetOrgPerson"]),
                ("cn", &["Barbara Jensen", "Babs Jensen"]),
                ("sn", &["Jensen"]),
                ("uid", &["bjensen"]),
                ("mail", &["bjensen@example.com"]),
                ("telephoneNumber", &["+1 313 555 1234"]),
                ("description", &["Knight of the realm"]),
                ("title", &["Director"]),
            ],
        ),
        add(
            "cn=Bjorn Jensen,ou=people,dc=example,dc=com",
            &[
                ("objectClass", &["inetOrgPerson"]),
                ("cn", &["Bjorn Jensen"]),
                ("sn", &["Jensen"]),
                ("uid", &["bjorn"]),
                ("mail", &["bjorn@example.com"]),
            ],
        ),
        add(
            JDOE,
            &[
                ("objectClass", &["inetOrgPerson", "posixAccount"]),
                ("cn", &["John Doe"]),
                ("sn", &["Doe"]),
                ("uid", &["jdoe"]),
                ("mail", &["jdoe@example.com"]),
                ("description", &["Nightly builds"]),
                ("uidNumber", &["1000"]),
                ("gidNumber", &["100"]),
                ("homeDirectory", &["/home/jdoe"]),
            ],
        ),
        add(SMITH_HEX, &[("objectClass", &["inetOrgPerson"]), ("cn", &["Smith, John"]), ("sn", &["Smith"])]),
        add(MULTI, &[("objectClass", &["inetOrgPerson"]), ("cn", &["a"]), ("sn", &["b"])]),
        add(
            UUID_DN,
            &[
                ("objectClass", &["inetOrgPerson"]),
                ("cn", &["0c0d2e5e-1111-2222-3333-444455556666"]),
                ("sn", &["uuid"]),
            ],
        ),
    ]
}

/// Starts both servers (slapd with its memberof overlay, ferrodir with its defaults) and
/// loads [`tree`] into each.
fn start_both() -> (Server, Server) {
    let slapd = servers::start_slapd(None);
    let ferrodir = servers::start_ferrodir(None);
    populate(&slapd, &tree());
    populate(&ferrodir, &tree());
    (slapd, ferrodir)
}

fn run_group(group: &str, steps: &[Step], known: &[Known]) {
    let (slapd, ferrodir) = start_both();
    let (theirs, ours) = (run(&slapd, steps), run(&ferrodir, steps));
    check(group, steps, &theirs, &ours, known);
}

#[test]
fn edges_approximate_matching() {
    let filters = [
        "(cn~=Barbara Jensen)",
        "(cn~=barbra jensen)",
        "(cn~=Barbera Jenson)",
        "(cn~=Jensen)",
        "(cn~=jensen barbara)",
        "(cn~=Babs)",
        "(cn~=B Jensen)",
        "(cn~=Smith, John)",
        "(cn~=John Smith)",
        "(cn~=Jon Do)",
        "(sn~=Jensen)",
        "(sn~=Jenson)",
        "(sn~=Jansen)",
        "(sn~=Doe)",
        "(sn~=Dough)",
        "(sn~=Do)",
        "(sn~=Jen)",
        "(uid~=bjensen)",
        "(uid~=BJENSEN)",
        "(uid~=bjensan)",
        "(mail~=bjensen@example.com)",
        "(mail~=BJENSEN@EXAMPLE.COM)",
        "(mail~=bjensan@example.com)",
        "(mail~=bjensen)",
        "(telephoneNumber~=+1 313 555 1234)",
        "(telephoneNumber~=+13135551234)",
        "(telephoneNumber~=313)",
        "(description~=knight)",
        "(description~=night)",
        "(description~=nightly builds)",
        "(title~=directer)",
        "(uidNumber~=1000)",
        "(uidNumber~=01000)",
        "(homeDirectory~=/home/jdoe)",
        "(homeDirectory~=/HOME/JDOE)",
        "(objectClass~=person)",
        "(objectClass~=PERSON)",
        "(objectClass~=persn)",
        "(entryDN~=cn=John Doe,ou=people,dc=example,dc=com)",
        "(entryDN~=CN=JOHN DOE,OU=PEOPLE,DC=EXAMPLE,DC=COM)",
        "(cn~=)",
        "(!(sn~=Jensen))",
    ];
    let steps: Vec<Step> = filters.iter().map(|f| anon(f, search(PEOPLE, Scope::Sub, f, &["1.1"]))).collect();
    run_group("approx", &steps, &[]);
}

#[test]
fn edges_compare_on_computed_attributes() {
    let cases: [(&str, &str, &str); 16] = [
        (BJENSEN, "entryDN", BJENSEN),
        (BJENSEN, "entryDN", "CN=BARBARA JENSEN, OU=PEOPLE, DC=EXAMPLE, DC=COM"),
        (BJENSEN, "entryDN", JDOE),
        (BJENSEN, "subschemaSubentry", "cn=Subschema"),
        (BJENSEN, "subschemaSubentry", "CN=SUBSCHEMA"),
        (BJENSEN, "subschemaSubentry", "cn = subschema"),
        (BJENSEN, "subschemaSubentry", "cn=other"),
        (BJENSEN, "subschemaSubentry", "not a dn"),
        (BJENSEN, "hasSubordinates", "FALSE"),
        (BJENSEN, "hasSubordinates", "TRUE"),
        (BJENSEN, "hasSubordinates", "false"),
        (PEOPLE, "hasSubordinates", "TRUE"),
        (SUFFIX, "hasSubordinates", "FALSE"),
        (BJENSEN, "structuralObjectClass", "inetOrgPerson"),
        ("", "subschemaSubentry", "cn=Subschema"),
        ("cn=Subschema", "subschemaSubentry", "cn=Subschema"),
    ];
    let steps: Vec<Step> = cases
        .iter()
        .map(|(dn, attr, value)| anon(&format!("{attr}={value} on {dn:?}"), compare_req(dn, attr, value)))
        .collect();
    const ENTRY_DN: &str = "RFC 5020 §2 gives entryDN EQUALITY distinguishedNameMatch, so Compare applies \
                            (RFC 4511 §4.10); slapd refuses entryDN compares (53)";
    const SUBSCHEMA: &str = "RFC 4512 §4.2 gives subschemaSubentry EQUALITY distinguishedNameMatch, so \
                             Compare applies (RFC 4511 §4.10); slapd refuses it (53)";
    let on_bjensen =
        |step: &'static str, ferrodir: &'static str, reason: &'static str| Known { step, ferrodir, reason };
    let known = [
        on_bjensen("entryDN=cn=Barbara Jensen,ou=people,dc=example,dc=com on \"cn=Barbara Jensen,ou=people,dc=example,dc=com\"", "rc=6", ENTRY_DN),
        on_bjensen("entryDN=CN=BARBARA JENSEN, OU=PEOPLE, DC=EXAMPLE, DC=COM on \"cn=Barbara Jensen,ou=people,dc=example,dc=com\"", "rc=6", ENTRY_DN),
        on_bjensen("entryDN=cn=John Doe,ou=people,dc=example,dc=com on \"cn=Barbara Jensen,ou=people,dc=example,dc=com\"", "rc=5", ENTRY_DN),
        on_bjensen("subschemaSubentry=cn=Subschema on \"cn=Barbara Jensen,ou=people,dc=example,dc=com\"", "rc=6", SUBSCHEMA),
        on_bjensen("subschemaSubentry=CN=SUBSCHEMA on \"cn=Barbara Jensen,ou=people,dc=example,dc=com\"", "rc=6", SUBSCHEMA),
        on_bjensen("subschemaSubentry=cn = subschema on \"cn=Barbara Jensen,ou=people,dc=example,dc=com\"", "rc=6", SUBSCHEMA),
        on_bjensen("subschemaSubentry=cn=other on \"cn=Barbara Jensen,ou=people,dc=example,dc=com\"", "rc=5", SUBSCHEMA),
        on_bjensen(
            "subschemaSubentry=cn=Subschema on \"\"",
            "rc=6",
            "RFC 4512 §5.1: the root DSE holds subschemaSubentry, compared by its equality rule; \
             slapd answers noSuchAttribute (16)",
        ),
    ];
    run_group("compare", &steps, &known);
}

#[test]
fn edges_filters_on_subschema_subentry_and_entry_dn() {
    let sub = [
        "(subschemaSubentry=cn=Subschema)",
        "(subschemaSubentry=CN=SUBSCHEMA)",
        "(subschemaSubentry=cn = subschema)",
        "(subschemaSubentry=cn=other)",
        "(!(subschemaSubentry=cn=Subschema))",
        "(subschemaSubentry=*)",
        "(&(objectClass=person)(subschemaSubentry=cn=subschema))",
        "(|(sn=nobody)(subschemaSubentry=cn=Subschema))",
        "(subschemaSubentry:distinguishedNameMatch:=cn=Subschema)",
        "(subschemaSubentry:=cn=Subschema)",
        "(subschemaSubentry>=cn=a)",
        "(subschemaSubentry=cn=sub*)",
        "(subschemaSubentry=not a dn)",
        "(entryDN=cn=John Doe,ou=people,dc=example,dc=com)",
        "(entryDN=CN=John Doe, OU=People, DC=example, DC=com)",
        "(entryDN=cn=Smith\\5c2C John,ou=people,dc=example,dc=com)",
        "(entryDN=cn=Smith\\5c, John,ou=people,dc=example,dc=com)",
        "(entryDN=sn=b+cn=a,ou=people,dc=example,dc=com)",
        "(entryDN:dnSubtreeMatch:=ou=people,dc=example,dc=com)",
        "(entryDN:dnOneLevelMatch:=dc=example,dc=com)",
        "(entryDN:dnSubordinateMatch:=ou=people,dc=example,dc=com)",
        "(entryDN:dnSuperiorMatch:=cn=John Doe,ou=people,dc=example,dc=com)",
        "(entryDN=*)",
        "(!(entryDN=cn=John Doe,ou=people,dc=example,dc=com))",
        "(entryDN=not a dn)",
    ];
    let mut steps: Vec<Step> = sub.iter().map(|f| anon(f, search(SUFFIX, Scope::Sub, f, &["1.1"]))).collect();
    for (base, f) in [
        ("", "(subschemaSubentry=cn=Subschema)"),
        ("", "(subschemaSubentry=*)"),
        ("cn=Subschema", "(subschemaSubentry=cn=Subschema)"),
        ("cn=Subschema", "(entryDN=cn=Subschema)"),
    ] {
        steps.push(anon(&format!("base {base:?} {f}"), search(base, Scope::Base, f, &["1.1"])));
    }
    const WHY: &str = "RFC 4511 §4.5.1.7 evaluates a filter on the entry's attributes, and every entry \
                       has subschemaSubentry (RFC 4512 §4.2), equal by distinguishedNameMatch; slapd \
                       finds no subschemaSubentry value to match (only presence)";
    let known: Vec<Known> = [
        ("(subschemaSubentry=cn=Subschema)", "rc=0 n=9"),
        ("(subschemaSubentry=CN=SUBSCHEMA)", "rc=0 n=9"),
        ("(subschemaSubentry=cn = subschema)", "rc=0 n=9"),
        ("(!(subschemaSubentry=cn=Subschema))", "rc=0 n=0"),
        ("(&(objectClass=person)(subschemaSubentry=cn=subschema))", "rc=0 n=6"),
        ("(|(sn=nobody)(subschemaSubentry=cn=Subschema))", "rc=0 n=9"),
        ("(subschemaSubentry:distinguishedNameMatch:=cn=Subschema)", "rc=0 n=9"),
        ("(subschemaSubentry:=cn=Subschema)", "rc=0 n=9"),
        ("base \"\" (subschemaSubentry=cn=Subschema)", "rc=0 n=1"),
    ]
    .into_iter()
    .map(|(step, ferrodir)| Known { step, ferrodir, reason: WHY })
    .collect();
    run_group("filters", &steps, &known);
}

#[test]
fn edges_add_of_the_empty_dn() {
    let org: &[(&str, &[&str])] = &[("objectClass", &["organization"]), ("o", &["root"])];
    let steps = vec![
        step("manager adds the empty DN", add("", org)),
        anon("anonymous adds the empty DN", add("", org)),
        step("manager adds the empty DN without attributes", add("", &[])),
        step(
            "manager adds cn=Subschema",
            add("cn=Subschema", &[("objectClass", &["subentry"]), ("cn", &["Subschema"])]),
        ),
        step("manager adds a DN of one space", add(" ", org)),
        anon("the root DSE afterwards", search("", Scope::Base, "(objectClass=*)", &["namingContexts", "o"])),
    ];
    run_group("add-empty-dn", &steps, &[]);
}

#[test]
fn edges_modify_add_without_values() {
    use ModOp::{Add, Delete, Replace};
    let modify = |changes: Vec<Change>| Request::Modify { dn: BJENSEN.into(), changes };
    let steps = vec![
        step("add no description (the entry has one)", modify(vec![change(Add, "description", &[])])),
        step("add no employeeType (the entry has none)", modify(vec![change(Add, "employeeType", &[])])),
        step("add no values of an unknown type", modify(vec![change(Add, "noSuchType", &[])])),
        step("add no objectClass", modify(vec![change(Add, "objectClass", &[])])),
        step(
            "add no values beside a valid change",
            modify(vec![change(Replace, "title", &["Boss"]), change(Add, "description", &[])]),
        ),
        step("delete no values of an absent type", modify(vec![change(Delete, "employeeType", &[])])),
        step("replace by no values of an absent type", modify(vec![change(Replace, "employeeType", &[])])),
        step(
            "add no values to a missing entry",
            Request::Modify {
                dn: "cn=Nobody,ou=people,dc=example,dc=com".into(),
                changes: vec![change(Add, "description", &[])],
            },
        ),
        anon("the entry afterwards", search(BJENSEN, Scope::Base, "(objectClass=*)", &["*"])),
    ];
    run_group("modify-add-none", &steps, &[]);
}

fn group_dn(name: &str) -> String {
    format!("cn={name},{GROUPS}")
}

fn group(name: &str, members: &[&str]) -> Request {
    add(&group_dn(name), &[("objectClass", &["groupOfNames"]), ("cn", &[name]), ("member", members)])
}

/// A DN as an RFC 4515 filter value: its backslashes escaped.
fn filter_value(dn: &str) -> String {
    dn.replace('\\', "\\5c")
}

#[test]
fn edges_member_values_in_unusual_dn_forms() {
    let spaced = "cn = Barbara Jensen , ou=people , dc=example,dc=com";
    let quoted = "cn=\"Smith, John\",ou=people,dc=example,dc=com";
    let reversed = "SN=B+CN=A,ou=people,dc=example,dc=com";
    let uuid_upper = "CN=0C0D2E5E-1111-2222-3333-444455556666,OU=people,DC=example,DC=com";
    // "John Doe" as a BER OCTET STRING (RFC 4514 §2.4's `#` form).
    let hex = "cn=#04084a6f686e20446f65,ou=people,dc=example,dc=com";
    let oid = "2.5.4.3=John Doe,ou=people,dc=example,dc=com";
    let mut steps = vec![
        step("group, member with \\2C", group("g-hex2c", &[SMITH_HEX])),
        step("group, member with \\,", group("g-comma", &[SMITH_ESCAPED])),
        step("group, member quoted", group("g-quoted", &[quoted])),
        step("group, multi-valued RDN", group("g-multi", &[MULTI])),
        step("group, multi-valued RDN reordered", group("g-multi-rev", &[reversed])),
        step("group, UUID-style member in capitals", group("g-uuid", &[uuid_upper])),
        step("group, member with spaces", group("g-spaced", &[spaced])),
        step("group, member in # hex form", group("g-hex-value", &[hex])),
        step("group, member by OID", group("g-oid", &[oid])),
        step("group, one member in two spellings", group("g-twice", &[SMITH_HEX, SMITH_ESCAPED])),
        step(
            "group, member not an entry",
            group("g-dangling", &["cn=Nobody\\2C Really,ou=people,dc=example,dc=com"]),
        ),
        anon("the groups' member values", search(GROUPS, Scope::One, "(objectClass=*)", &["member"])),
    ];
    let compares = [
        ("g-hex2c", SMITH_ESCAPED),
        ("g-hex2c", "cn=smith\\2c john,ou=people,dc=example,dc=com"),
        ("g-hex2c", quoted),
        ("g-comma", SMITH_HEX),
        ("g-multi", reversed),
        ("g-multi", "cn=a,ou=people,dc=example,dc=com"),
        ("g-multi-rev", MULTI),
        ("g-uuid", UUID_DN),
        ("g-spaced", BJENSEN),
        ("g-hex-value", JDOE),
        ("g-oid", JDOE),
    ];
    for (name, value) in compares {
        steps.push(anon(
            &format!("compare {name} member={value}"),
            compare_req(&group_dn(name), "member", value),
        ));
    }
    for dn in [
        SMITH_HEX,
        SMITH_ESCAPED,
        "cn=smith\\2c john,ou=people,dc=example,dc=com",
        quoted,
        MULTI,
        reversed,
        UUID_DN,
        uuid_upper,
        BJENSEN,
        JDOE,
    ] {
        let f = format!("(member={})", filter_value(dn));
        steps.push(anon(&f, search(GROUPS, Scope::One, &f, &["1.1"])));
    }
    steps.push(anon("memberOf of the people", search(PEOPLE, Scope::One, "(objectClass=*)", &["memberOf"])));
    for name in ["g-hex2c", "g-comma", "g-multi-rev", "g-uuid", "g-spaced"] {
        let f = format!("(memberOf={})", group_dn(name));
        steps.push(anon(&f, search(PEOPLE, Scope::One, &f, &["1.1"])));
    }
    run_group("members", &steps, &[]);
}

/// Steps about memberOf on a server where bjensen is in one group.
fn member_of_steps() -> Vec<Step> {
    let staff = group_dn("staff");
    vec![
        step("group staff", group("staff", &[BJENSEN])),
        anon("bjensen with +", search(BJENSEN, Scope::Base, "(objectClass=*)", &["+"])),
        anon("bjensen with memberOf", search(BJENSEN, Scope::Base, "(objectClass=*)", &["memberOf"])),
        anon("bjensen with *", search(BJENSEN, Scope::Base, "(objectClass=*)", &["*"])),
        anon("(memberOf=staff)", search(PEOPLE, Scope::One, &format!("(memberOf={staff})"), &["1.1"])),
        anon("(memberOf=*)", search(PEOPLE, Scope::One, "(memberOf=*)", &["1.1"])),
        anon("compare memberOf", compare_req(BJENSEN, "memberOf", &staff)),
    ]
}

#[test]
fn edges_member_of_with_and_without_a_group_overlay() {
    // slapd with the overlay against ferrodir's default (`memberof = true`).
    run_group("memberof-on", &member_of_steps(), &[]);
    // slapd without it against `memberof = false`.
    let slapd = servers::start_slapd_without_member_of();
    let ferrodir = servers::start_ferrodir_with(None, "memberof = false\n");
    populate(&slapd, &tree());
    populate(&ferrodir, &tree());
    let steps = member_of_steps();
    let (theirs, ours) = (run(&slapd, &steps), run(&ferrodir, &steps));
    let known = [Known {
        step: "compare memberOf",
        ferrodir: "rc=16",
        reason: "ferrodir's schema always defines memberOf; with `memberof = false` it has no values \
                 (noSuchAttribute, RFC 4511 §4.10); slapd without the overlay has no such type (17)",
    }];
    check("memberof-off", &steps, &theirs, &ours, &known);
}

const PAGED: &str = "1.2.840.113556.1.4.319";

/// A paged-results control value (RFC 2696): SEQUENCE { size INTEGER, cookie OCTET STRING }.
fn paged(size: u8, cookie: &[u8], critical: bool) -> RawControl {
    assert!(cookie.len() < 0x70 && size < 0x80);
    let mut body = vec![0x02, 1, size, 0x04, cookie.len() as u8];
    body.extend_from_slice(cookie);
    let mut value = vec![0x30, body.len() as u8];
    value.extend(body);
    RawControl { ctype: PAGED.into(), crit: critical, val: Some(value) }
}

/// What a paged search answered: the result code, the entries, and the response control's
/// cookie (None: no control).
#[derive(Debug, PartialEq)]
struct Page {
    rc: u32,
    entries: usize,
    cookie: Option<Vec<u8>>,
}

impl Page {
    /// What must agree: cookies are each server's own, only their being empty compares.
    fn shape(&self) -> String {
        let cookie = match &self.cookie {
            None => "no control".to_string(),
            Some(c) if c.is_empty() => "empty cookie".to_string(),
            Some(_) => "a cookie".to_string(),
        };
        format!("rc={} n={} {cookie}", self.rc, self.entries)
    }
}

fn paged_search(conn: &mut LdapConn, control: RawControl) -> Page {
    let SearchResult(entries, result) = conn
        .with_controls(vec![control])
        .search(PEOPLE, L3Scope::Subtree, "(objectClass=*)", vec!["1.1"])
        .expect("paged search");
    let cookie = result.ctrls.iter().find(|c| c.1.ctype == PAGED).and_then(|c| c.1.val.clone()).map(|v| {
        // SEQUENCE { INTEGER (short), OCTET STRING (short) }
        let size_len = usize::from(v[3]);
        let at = 4 + size_len;
        let len = usize::from(v[at + 1]);
        v[at + 2..at + 2 + len].to_vec()
    });
    Page { rc: result.rc, entries: entries.len(), cookie }
}

/// The page-size-0 script on one server: (step name, shape of the answer).
fn paged_script(server: &Server) -> Vec<(String, String)> {
    let mut conn = LdapConn::new(&format!("ldap://{}", server.addr)).expect("connect");
    conn.simple_bind(MANAGER_DN, MANAGER_PW).expect("bind").success().expect("bind");
    let mut out = Vec::new();
    let mut record = |name: &str, page: &Page| out.push((name.to_string(), page.shape()));
    let counting = paged_search(&mut conn, paged(0, b"", false));
    record("size 0, first request", &counting);
    let cookie = counting.cookie.clone().unwrap_or_default();
    record("size 2 with the size-0 request's cookie", &paged_search(&mut conn, paged(2, &cookie, false)));
    record("size 0, first request, critical", &paged_search(&mut conn, paged(0, b"", true)));
    let first = paged_search(&mut conn, paged(2, b"", false));
    record("size 2, first page", &first);
    let cookie = first.cookie.clone().unwrap_or_default();
    record("size 0 with the cookie: ends the search", &paged_search(&mut conn, paged(0, &cookie, false)));
    record("size 2 with the ended search's cookie", &paged_search(&mut conn, paged(2, &cookie, false)));
    record("size 0 with a made-up cookie", &paged_search(&mut conn, paged(0, b"nonsense", false)));
    let again = paged_search(&mut conn, paged(3, b"", false));
    record("size 3, first page", &again);
    let cookie = again.cookie.clone().unwrap_or_default();
    record("size 3, next page", &paged_search(&mut conn, paged(3, &cookie, false)));
    out
}

#[test]
fn edges_paged_search_of_page_size_zero() {
    let (slapd, ferrodir) = start_both();
    let (theirs, ours) = (paged_script(&slapd), paged_script(&ferrodir));
    let transcript: Vec<String> = theirs
        .iter()
        .zip(&ours)
        .map(|((name, a), (_, b))| format!("{name} | slapd: {a} | ferrodir: {b}"))
        .collect();
    let transcript = transcript.join("\n");
    println!("paged:\n{transcript}");
    // Where ferrodir answers otherwise on purpose (docs/CONFORMANCE.md): (step, ferrodir's
    // answer, why).
    let known = [
        (
            "size 2 with the size-0 request's cookie",
            "rc=0 n=2 a cookie",
            "RFC 2696 §3: a page returns up to its size of entries; slapd's cookie from a size-0 \
             request gives an empty page",
        ),
        (
            "size 0 with the cookie: ends the search",
            "rc=0 n=0 empty cookie",
            "RFC 2696 §3: the searchResultDone carries the control, its cookie empty when no \
             entries are left; slapd sends no control",
        ),
        (
            "size 0 with a made-up cookie",
            "rc=2 n=0 empty cookie",
            "the same: the control, with an empty cookie",
        ),
    ];
    assert_eq!(ours.len(), theirs.len());
    for ((name, a), (_, b)) in theirs.iter().zip(&ours) {
        match known.iter().find(|k| k.0 == name) {
            Some((_, expected, why)) => {
                assert_eq!(b, expected, "{name}: ferrodir ({why})\n{transcript}");
                assert_ne!(a, b, "{name}: slapd now agrees, drop it from `known`\n{transcript}");
            }
            None => assert_eq!(b, a, "{name}: paged searches of size 0 differ\n{transcript}"),
        }
    }
}

/// StartTLS over `url` with ldapwhoami `-ZZ` (fail unless TLS starts): the result code the
/// server answered (from `ldap_start_tls: ... (N)`), 0 when TLS started.
fn start_tls_code(url: &str) -> i64 {
    let output = Command::new("ldapwhoami")
        .args(["-x", "-ZZ", "-H", url])
        .env("LDAPTLS_REQCERT", "never")
        .output()
        .unwrap_or_else(|e| panic!("cannot run ldapwhoami (ldap-utils): {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success() {
        return 0;
    }
    let line =
        stderr.lines().find(|l| l.contains("ldap_start_tls")).unwrap_or_else(|| panic!("{url}: {stderr}"));
    let code =
        line.rsplit_once('(').and_then(|(_, rest)| rest.split_once(')')).map(|(n, _)| n.trim().to_string());
    code.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{url}: no result code in {line:?}"))
}

#[test]
fn edges_start_tls_on_ldapi_without_a_certificate() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (slapd_socket, ferrodir_socket) = (dir.path().join("slapd.sock"), dir.path().join("ferrodir.sock"));
    let slapd = servers::start_slapd_with_ldapi(&slapd_socket, "");
    let ferrodir =
        servers::start_ferrodir_with(None, &format!("listen_ldapi = \"{}\"\n", ferrodir_socket.display()));
    let theirs = [
        start_tls_code(&servers::ldapi_url(&slapd_socket)),
        start_tls_code(&format!("ldap://{}", slapd.addr)),
    ];
    let ours = [
        start_tls_code(&servers::ldapi_url(&ferrodir_socket)),
        start_tls_code(&format!("ldap://{}", ferrodir.addr)),
    ];
    println!("StartTLS without a certificate (ldapi, ldap): slapd {theirs:?}, ferrodir {ours:?}");
    assert_eq!(ours, theirs, "StartTLS without a certificate, over ldapi then ldap");
    // Neither lists it in the root DSE: it is an operation the server does not offer.
    let root_dse = search("", Scope::Base, "(objectClass=*)", &["supportedExtension"]);
    let steps = [anon("supportedExtension", root_dse)];
    let listed = |server: &Server| {
        let reply = connect(server, false).call(&steps[0].request);
        format!("{reply:?}").contains("1.3.6.1.4.1.1466.20037")
    };
    assert_eq!((listed(&ferrodir), listed(&slapd)), (false, false), "StartTLS in supportedExtension");
}

/// A self-signed certificate and its key for `localhost`, written into `dir`.
fn self_signed(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let output = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl: {e}"));
    assert!(output.status.success(), "openssl: {}", String::from_utf8_lossy(&output.stderr));
    (cert, key)
}

#[test]
fn edges_start_tls_on_ldapi_with_a_certificate() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (cert, key) = self_signed(dir.path());
    let (slapd_socket, ferrodir_socket) = (dir.path().join("slapd.sock"), dir.path().join("ferrodir.sock"));
    let global = format!("TLSCertificateFile {}\nTLSCertificateKeyFile {}\n", cert.display(), key.display());
    let slapd = servers::start_slapd_with_ldapi(&slapd_socket, &global);
    let ferrodir = servers::start_ferrodir_with(
        None,
        &format!(
            "listen_ldapi = \"{}\"\n[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            ferrodir_socket.display(),
            cert.display(),
            key.display()
        ),
    );
    // Over ldap://, both start TLS (ldapwhoami -ZZ completes).
    let tcp = (
        start_tls_code(&format!("ldap://{}", ferrodir.addr)),
        start_tls_code(&format!("ldap://{}", slapd.addr)),
    );
    assert_eq!(tcp, (0, 0), "StartTLS with a certificate over ldap://");
    // Over ldapi://, the server's answer itself (libldap's own client cannot finish a
    // handshake there: ldapwhoami -ZZ fails with a connect error, -11, against slapd).
    let (theirs, ours) =
        (start_tls_over_unix_socket(&slapd_socket), start_tls_over_unix_socket(&ferrodir_socket));
    println!("StartTLS over ldapi with a certificate: slapd {theirs}, ferrodir {ours}");
    // A documented difference (docs/CONFORMANCE.md): ferrodir refuses, slapd accepts.
    assert_eq!(ours, 1, "ferrodir refuses StartTLS on the ldapi socket with operationsError");
    assert_ne!(theirs, ours, "slapd now refuses StartTLS on ldapi too: drop the documented difference");
}

/// Sends a bare StartTLS request over the Unix socket `path`; the result code of the
/// ExtendedResponse.
fn start_tls_over_unix_socket(path: &Path) -> i64 {
    use std::io::{Read, Write};
    let oid = b"1.3.6.1.4.1.1466.20037";
    let request = [&[0x77, 2 + oid.len() as u8, 0x80, oid.len() as u8][..], oid].concat();
    let message = [&[0x30, 3 + request.len() as u8, 0x02, 0x01, 0x01][..], &request].concat();
    let mut stream = std::os::unix::net::UnixStream::connect(path).expect("connect to the ldapi socket");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).expect("timeout");
    stream.write_all(&message).expect("send StartTLS");
    let mut answer = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let read = stream.read(&mut chunk).expect("read the ExtendedResponse");
        answer.extend_from_slice(&chunk[..read]);
        // The resultCode: the first ENUMERATED (0a 01 N) after the ExtendedResponse tag.
        let at = answer.iter().position(|b| *b == 0x78);
        if let Some(code) = at.and_then(|at| answer[at..].windows(3).find(|w| w[0] == 0x0a && w[1] == 1)) {
            return i64::from(code[2]);
        }
        assert!(read > 0, "the connection closed without an ExtendedResponse: {answer:02x?}");
    }
}
