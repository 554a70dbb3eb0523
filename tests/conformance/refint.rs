//! Referential integrity and DN-valued matching against slapd: slapd with `overlay refint`
//! (`refint_attributes`, `refint_nothing`), ferrodir with `[refint]`, the same script of
//! deletes and renames on both, then every group's reference attributes compared; and DN
//! cases (escapes, hex, multi-valued RDNs, OIDs, a type named twice in one RDN) sent to both,
//! their result codes and match counts compared.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use ldap3::{LdapConn, LdapConnSettings, Mod, Scope, SearchEntry};

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};

const NOBODY: &str = "cn=nobody,dc=example,dc=com";
const ATTRS: [&str; 5] = ["member", "uniqueMember", "owner", "seeAlso", "manager"];

fn connect(server: &Server) -> LdapConn {
    let settings = LdapConnSettings::new().set_conn_timeout(Duration::from_secs(10));
    let mut conn = LdapConn::with_settings(settings, &format!("ldap://{}", server.addr)).expect("connect");
    conn.with_timeout(Duration::from_secs(10))
        .simple_bind(MANAGER_DN, MANAGER_PW)
        .and_then(|r| r.success())
        .expect("bind as the manager");
    conn
}

fn add(conn: &mut LdapConn, dn: &str, attrs: &[(&str, &[&str])]) -> u32 {
    let attrs: Vec<(&str, HashSet<&str>)> =
        attrs.iter().map(|(k, v)| (*k, v.iter().copied().collect())).collect();
    conn.with_timeout(Duration::from_secs(10)).add(dn, attrs).map(|r| r.rc).unwrap_or(u32::MAX)
}

fn start_both() -> (Server, Server) {
    let slapd = servers::start_slapd_with_overlay(
        "refint",
        &format!("overlay refint\nrefint_attributes {}\nrefint_nothing \"{NOBODY}\"\n", ATTRS.join(" ")),
    );
    let ferrodir =
        servers::start_ferrodir_with(None, &format!("[refint]\nenabled = true\nnothing = \"{NOBODY}\"\n"));
    (slapd, ferrodir)
}

/// The tree both servers start from.
fn populate(conn: &mut LdapConn) {
    let ou = |name: &str| format!("ou={name},{SUFFIX}");
    let user = |uid: &str, parent: &str| format!("uid={uid},{parent}");
    let (people, sub) = (ou("people"), ou("sub"));
    assert_eq!(
        add(
            conn,
            SUFFIX,
            &[("objectClass", &["dcObject", "organization"]), ("dc", &["example"]), ("o", &["x"])]
        ),
        0
    );
    for name in ["people", "sub", "groups"] {
        assert_eq!(add(conn, &ou(name), &[("objectClass", &["organizationalUnit"]), ("ou", &[name])]), 0);
    }
    for (uid, parent) in [("u0", &people), ("u1", &people), ("u2", &people), ("u3", &people), ("s0", &sub)] {
        let one = [uid];
        let rc = add(
            conn,
            &user(uid, parent),
            &[("objectClass", &["inetOrgPerson"]), ("uid", &one), ("cn", &one), ("sn", &one)],
        );
        assert_eq!(rc, 0, "add {uid}");
    }
    let g = |cn: &str| format!("cn={cn},{}", ou("groups"));
    let (u0, u1, u2, u3, s0) = (
        user("u0", &people),
        user("u1", &people),
        user("u2", &people),
        user("u3", &people),
        user("s0", &sub),
    );
    let u0_spelled = "UID=u0 , OU=People,DC=Example,DC=Com".to_string();
    let rows: [(String, &[(&str, &[&str])]); 4] = [
        (
            g("names"),
            &[
                ("objectClass", &["groupOfNames"]),
                ("cn", &["names"]),
                ("member", &[&u0, &u1, &s0]),
                ("owner", &[&u0_spelled]),
                ("seeAlso", &[&s0]),
            ],
        ),
        (
            g("unique"),
            &[("objectClass", &["groupOfUniqueNames"]), ("cn", &["unique"]), ("uniqueMember", &[&u0, &u2])],
        ),
        (g("last"), &[("objectClass", &["groupOfNames"]), ("cn", &["last"]), ("member", &[&u3])]),
        (
            format!("uid=boss,{}", ou("groups")),
            &[
                ("objectClass", &["inetOrgPerson"]),
                ("uid", &["boss"]),
                ("cn", &["boss"]),
                ("sn", &["boss"]),
                ("manager", &[&u0]),
                ("seeAlso", &[&s0, &u1]),
            ],
        ),
    ];
    for (dn, attrs) in rows {
        assert_eq!(add(conn, &dn, attrs), 0, "add {dn}");
    }
}

/// Deletes and renames (leaf, move, subtree) whose references refint keeps in step. slapd's
/// refint rewrites after it answered (a thread of its own), so after each step the script
/// waits until no reference names a DN the step took away, on both servers alike.
fn script(conn: &mut LdapConn) -> Vec<u32> {
    let people = format!("ou=people,{SUFFIX}");
    let sub = format!("ou=sub,{SUFFIX}");
    let mut codes = Vec::new();
    let mut step =
        |conn: &mut LdapConn,
         gone: &[String],
         what: &dyn Fn(&mut LdapConn) -> ldap3::result::Result<ldap3::LdapResult>| {
            codes.push(what(conn).map(|r| r.rc).unwrap_or(u32::MAX));
            settle(conn, gone);
        };
    step(conn, &[format!("uid=u0,{people}")], &|c| c.delete(&format!("uid=u0,{people}")));
    step(conn, &[format!("uid=u1,{people}")], &|c| {
        c.modifydn(&format!("uid=u1,{people}"), "uid=u1x", true, None)
    });
    step(conn, &[format!("uid=u2,{people}")], &|c| {
        c.modifydn(&format!("uid=u2,{people}"), "uid=u2", true, Some(&sub))
    });
    step(conn, &[format!("uid=u2,{sub}"), format!("uid=s0,{sub}")], &|c| {
        c.modifydn(&sub, "ou=moved", true, None)
    });
    step(conn, &[format!("uid=u3,{people}")], &|c| c.delete(&format!("uid=u3,{people}")));
    codes
}

/// Waits (10 s at most) until no reference under ou=groups names one of `gone`: refint has
/// done its rewriting. A server that never gets there is left to the comparison of the
/// references that follows, which then says what it kept.
fn settle(conn: &mut LdapConn, gone: &[String]) {
    let gone: Vec<String> = gone.iter().map(|dn| dn.to_lowercase().replace(' ', "")).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let refs = references(conn);
        if !refs.values().flatten().any(|value| gone.contains(value)) || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every reference attribute of the entries under ou=groups, values lowercased and parsed
/// back to one spelling (the servers may print a rewritten DN differently).
fn references(conn: &mut LdapConn) -> BTreeMap<String, BTreeSet<String>> {
    let (entries, _) = conn
        .with_timeout(Duration::from_secs(10))
        .search(&format!("ou=groups,{SUFFIX}"), Scope::OneLevel, "(objectClass=*)", ATTRS.to_vec())
        .and_then(|r| r.success())
        .expect("search the groups");
    let mut out = BTreeMap::new();
    for entry in entries.into_iter().map(SearchEntry::construct) {
        for (name, values) in entry.attrs {
            let key = format!("{} {}", entry.dn.to_lowercase(), name.to_lowercase());
            let values = values.iter().map(|v| v.to_lowercase().replace(' ', "")).collect();
            out.insert(key, values);
        }
    }
    out
}

#[test]
fn refint_matches_slapd() {
    let (slapd, ferrodir) = start_both();
    let mut results = Vec::new();
    for server in [&slapd, &ferrodir] {
        let mut conn = connect(server);
        populate(&mut conn);
        let codes = script(&mut conn);
        let mut last = conn
            .with_timeout(Duration::from_secs(10))
            .search(
                &format!("cn=last,ou=groups,{SUFFIX}"),
                Scope::Base,
                "(objectClass=*)",
                vec!["modifiersName"],
            )
            .and_then(|r| r.success())
            .map(|(e, _)| e)
            .unwrap_or_default();
        let modifier = last
            .pop()
            .map(SearchEntry::construct)
            .and_then(|e| e.attrs.get("modifiersName").and_then(|v| v.first().cloned()))
            .unwrap_or_default()
            .to_lowercase();
        results.push((codes, references(&mut conn), modifier));
    }
    let (theirs, ours) = (&results[0], &results[1]);
    assert_eq!(theirs.0, ours.0, "result codes of the script differ (slapd, then ferrodir)");
    let mut differences = Vec::new();
    for key in theirs.1.keys().chain(ours.1.keys()).collect::<BTreeSet<_>>() {
        let (a, b) = (theirs.1.get(key), ours.1.get(key));
        if a != b {
            differences.push(format!("{key}: slapd {a:?}, ferrodir {b:?}"));
        }
    }
    assert!(differences.is_empty(), "references differ:\n{}", differences.join("\n"));
    assert_eq!(theirs.2, ours.2, "modifiersName of a group refint rewrote");
}

/// A DN case: an operation and what came back (a result code, or a count of entries).
type Case = (&'static str, Box<dyn Fn(&mut LdapConn) -> String>);

fn code(result: ldap3::result::Result<ldap3::LdapResult>) -> String {
    match result {
        Ok(r) => r.rc.to_string(),
        Err(e) => format!("error {e}"),
    }
}

fn count(conn: &mut LdapConn, base: &str, filter: &str) -> String {
    match conn.with_timeout(Duration::from_secs(10)).search(base, Scope::Subtree, filter, vec!["1.1"]) {
        Ok(result) => {
            let (entries, done) = (result.0.len(), result.1.rc);
            format!("rc {done}, {entries} entries")
        }
        Err(e) => format!("error {e}"),
    }
}

fn dn_cases() -> Vec<Case> {
    let group = format!("cn=dns,ou=groups,{SUFFIX}");
    let groups = format!("ou=groups,{SUFFIX}");
    let g = group.clone();
    let gs = groups.clone();
    let mut cases: Vec<Case> = vec![(
        "add a group whose members are spelled oddly",
        Box::new(move |c| {
            let members =
                ["cn=a\\2cb,dc=example,dc=com", "cn=x+sn=y,dc=example,dc=com", "CN = Q , DC=Example ,DC=COM"];
            code(c.add(
                &g,
                vec![
                    ("objectClass", HashSet::from(["groupOfNames"])),
                    ("cn", HashSet::from(["dns"])),
                    ("member", members.into()),
                ],
            ))
        }),
    )];
    let filters = [
        "(member=cn=a\\5c,b,dc=example,dc=com)",
        "(member=cn=a\\5c2cb,dc=example,dc=com)",
        "(member=sn=y+cn=x,dc=example,dc=com)",
        "(member=SN=Y + CN=X, DC=EXAMPLE, DC=COM)",
        "(member=2.5.4.3=q,dc=example,dc=com)",
        "(member=cn=#040171,dc=example,dc=com)",
        "(member=cn=q,0.9.2342.19200300.100.1.25=example,dc=com)",
    ];
    for filter in filters {
        let base = gs.clone();
        cases.push((filter, Box::new(move |c| count(c, &base, filter))));
    }
    let g = group.clone();
    cases.push((
        "compare member with another spelling",
        Box::new(move |c| {
            match c.with_timeout(Duration::from_secs(10)).compare(&g, "member", "sn=Y+cn=X,dc=example,dc=com")
            {
                Ok(r) => r.0.rc.to_string(),
                Err(e) => format!("error {e}"),
            }
        }),
    ));
    let gs2 = groups.clone();
    cases.push((
        "add cn=a+cn=b",
        Box::new(move |c| {
            code(c.add(
                &format!("cn=a+cn=b,{gs2}"),
                vec![
                    ("objectClass", HashSet::from(["person"])),
                    ("cn", HashSet::from(["a", "b"])),
                    ("sn", HashSet::from(["s"])),
                ],
            ))
        }),
    ));
    let gs3 = groups.clone();
    cases.push((
        "search base cn=a+cn=b",
        Box::new(move |c| {
            match c.with_timeout(Duration::from_secs(10)).search(
                &format!("cn=a+cn=b,{gs3}"),
                Scope::Base,
                "(objectClass=*)",
                vec!["1.1"],
            ) {
                Ok(r) => r.1.rc.to_string(),
                Err(e) => format!("error {e}"),
            }
        }),
    ));
    let g = group.clone();
    cases.push((
        "compare on cn=a+cn=b",
        Box::new(move |c| {
            let dn = g.replacen("cn=dns", "cn=a+cn=b", 1);
            match c.with_timeout(Duration::from_secs(10)).compare(&dn, "cn", "a") {
                Ok(r) => r.0.rc.to_string(),
                Err(e) => format!("error {e}"),
            }
        }),
    ));
    let g = group.clone();
    cases.push(("modrdn to cn=a+cn=b", Box::new(move |c| code(c.modifydn(&g, "cn=a+cn=b", false, None)))));
    let g = group.clone();
    cases.push((
        "modify: add member cn=a+cn=b,...",
        Box::new(move |c| {
            code(c.modify(&g, vec![Mod::Add("member", HashSet::from(["cn=a+cn=b,dc=example,dc=com"]))]))
        }),
    ));
    let gs5 = groups.clone();
    cases.push((
        "search base with a hex value",
        Box::new(move |c| {
            match c.with_timeout(Duration::from_secs(10)).search(
                &format!("cn=#040171,{gs5}"),
                Scope::Base,
                "(objectClass=*)",
                vec!["1.1"],
            ) {
                Ok(r) => r.1.rc.to_string(),
                Err(e) => format!("error {e}"),
            }
        }),
    ));
    let gs6 = groups.clone();
    cases.push((
        "add an entry named with a hex value",
        Box::new(move |c| {
            code(c.add(
                &format!("cn=#040171,{gs6}"),
                vec![
                    ("objectClass", HashSet::from(["person"])),
                    ("cn", HashSet::from(["q"])),
                    ("sn", HashSet::from(["s"])),
                ],
            ))
        }),
    ));
    let gs7 = groups.clone();
    cases.push(("read back the hex-named entry as cn=q", Box::new(move |c| count(c, &gs7, "(cn=q)"))));
    let g = group.clone();
    cases.push((
        "modify: add member with a hex value",
        Box::new(move |c| {
            code(c.modify(&g, vec![Mod::Add("member", HashSet::from(["cn=#040172,dc=example,dc=com"]))]))
        }),
    ));
    let gs8 = groups.clone();
    cases.push((
        "(member=cn=r,dc=example,dc=com) after the hex add",
        Box::new(move |c| count(c, &gs8, "(member=cn=r,dc=example,dc=com)")),
    ));
    let gs4 = groups.clone();
    cases.push((
        "add a group with member cn=a+cn=b,...",
        Box::new(move |c| {
            code(c.add(
                &format!("cn=dup,{gs4}"),
                vec![
                    ("objectClass", HashSet::from(["groupOfNames"])),
                    ("cn", HashSet::from(["dup"])),
                    ("member", HashSet::from(["cn=a+cn=b,dc=example,dc=com"])),
                ],
            ))
        }),
    ));
    cases
}

#[test]
fn dn_valued_matching_matches_slapd() {
    let (slapd, ferrodir) = start_both();
    let mut answers: Vec<Vec<String>> = Vec::new();
    for server in [&slapd, &ferrodir] {
        let mut conn = connect(server);
        populate(&mut conn);
        answers.push(dn_cases().iter().map(|(_, case)| case(&mut conn)).collect());
    }
    let differences: Vec<String> = dn_cases()
        .iter()
        .zip(answers[0].iter().zip(&answers[1]))
        .filter(|(_, (a, b))| a != b)
        .map(|((name, _), (a, b))| format!("{name}: slapd {a}, ferrodir {b}"))
        .collect();
    assert!(differences.is_empty(), "answers differ:\n{}", differences.join("\n"));
}
