//! Dynamic groups against slapd 2.5 with slapo-dynlist (`dynlist-attrset groupOfURLs
//! memberURL member`, dyngroup.schema loaded): the same tree added to both, then each
//! group's computed member values, the groups' whole entries, `(member=DN)` and
//! `(member=*)` searches and Compares of member, compared. memberURLs of each scope, with a
//! filter, a base outside the tree, a base that does not exist, one that selects nothing,
//! two that overlap (each member once) and one that selects other dynamic groups (listed,
//! never expanded: dynlist without nesting).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use ldap3::{LdapConn, LdapConnSettings, Scope, SearchEntry};

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};

fn connect(server: &Server, bind: bool) -> LdapConn {
    let settings = LdapConnSettings::new().set_conn_timeout(Duration::from_secs(10));
    let mut conn = LdapConn::with_settings(settings, &format!("ldap://{}", server.addr)).expect("connect");
    if bind {
        conn.with_timeout(Duration::from_secs(10))
            .simple_bind(MANAGER_DN, MANAGER_PW)
            .and_then(|r| r.success())
            .expect("bind as the manager");
    }
    conn
}

fn people() -> String {
    format!("ou=people,{SUFFIX}")
}

fn groups() -> String {
    format!("ou=groups,{SUFFIX}")
}

/// The groups: (cn, memberURLs).
fn dynamic_groups() -> Vec<(&'static str, Vec<String>)> {
    let p = people();
    vec![
        ("sub", vec![format!("ldap:///{p}??sub?(objectClass=inetOrgPerson)")]),
        ("one", vec![format!("ldap:///{p}??one?(objectClass=*)")]),
        ("base", vec![format!("ldap:///uid=alice,{p}??base")]),
        ("children", vec![format!("ldap:///{p}??children?(uid=*)")]),
        ("filter", vec![format!("ldap:///{p}??sub?(&(objectClass=inetOrgPerson)(employeeType=staff))")]),
        ("outside", vec!["ldap:///dc=other,dc=org??sub".to_string()]),
        ("missing", vec![format!("ldap:///ou=missing,{SUFFIX}??sub")]),
        ("empty", vec![format!("ldap:///{p}??sub?(uid=nobody)")]),
        ("overlap", vec![format!("ldap:///{p}??sub?(uid=*)"), format!("ldap:///uid=alice,{p}??base")]),
        ("nested", vec![format!("ldap:///{}??one?(objectClass=groupOfURLs)", groups())]),
        ("none", vec![]),
    ]
}

fn populate(conn: &mut LdapConn) {
    let add = |conn: &mut LdapConn, dn: &str, attrs: Vec<(&str, Vec<String>)>| {
        let attrs: Vec<(String, HashSet<String>)> =
            attrs.into_iter().map(|(k, v)| (k.to_string(), v.into_iter().collect())).collect();
        let rc = conn.with_timeout(Duration::from_secs(10)).add(dn, attrs).map(|r| r.rc).unwrap_or(u32::MAX);
        assert_eq!(rc, 0, "add {dn}");
    };
    let v = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    add(
        conn,
        SUFFIX,
        vec![("objectClass", v(&["dcObject", "organization"])), ("dc", v(&["example"])), ("o", v(&["x"]))],
    );
    for ou in ["people", "groups"] {
        add(
            conn,
            &format!("ou={ou},{SUFFIX}"),
            vec![("objectClass", v(&["organizationalUnit"])), ("ou", v(&[ou]))],
        );
    }
    add(
        conn,
        &format!("ou=sub,{}", people()),
        vec![("objectClass", v(&["organizationalUnit"])), ("ou", v(&["sub"]))],
    );
    for (uid, parent, kind) in [
        ("alice", people(), "staff"),
        ("bob", people(), "guest"),
        ("carol", people(), "staff"),
        ("dave", format!("ou=sub,{}", people()), "staff"),
        ("erin", format!("ou=sub,{}", people()), "guest"),
    ] {
        add(
            conn,
            &format!("uid={uid},{parent}"),
            vec![
                ("objectClass", v(&["inetOrgPerson"])),
                ("uid", v(&[uid])),
                ("cn", v(&[uid])),
                ("sn", v(&[uid])),
                ("employeeType", v(&[kind])),
            ],
        );
    }
    for (cn, urls) in dynamic_groups() {
        let mut attrs = vec![("objectClass", v(&["groupOfURLs"])), ("cn", v(&[cn]))];
        if !urls.is_empty() {
            attrs.push(("memberURL", urls));
        }
        add(conn, &format!("cn={cn},{}", groups()), attrs);
    }
}

/// A DN as compared: lower case, no spaces after commas.
fn norm(dn: &str) -> String {
    dn.to_ascii_lowercase().replace(", ", ",")
}

/// Each entry found: its DN and its attributes, names lower-cased, values as sets (member
/// values normalised as DNs; slapd and ferrodir list them in different orders).
fn search(
    conn: &mut LdapConn,
    base: &str,
    scope: Scope,
    filter: &str,
    attrs: &[&str],
) -> Result<BTreeMap<String, BTreeMap<String, BTreeSet<String>>>, u32> {
    let result = conn
        .with_timeout(Duration::from_secs(10))
        .search(base, scope, filter, attrs.to_vec())
        .map_err(|_| u32::MAX)?;
    let (entries, result) = result.success().map(|(e, r)| (e, r)).map_err(|e| match e {
        ldap3::LdapError::LdapResult { result } => result.rc,
        _ => u32::MAX,
    })?;
    let _ = result;
    Ok(entries
        .into_iter()
        .map(SearchEntry::construct)
        .map(|entry| {
            let attrs = entry
                .attrs
                .into_iter()
                .map(|(name, values)| {
                    let name = name.to_ascii_lowercase();
                    let values =
                        values.iter().map(|v| if name == "member" { norm(v) } else { v.clone() }).collect();
                    (name, values)
                })
                .collect();
            (norm(&entry.dn), attrs)
        })
        .collect())
}

/// What one server answers to the whole script, in order: a label and the answer.
fn script(server: &Server) -> Vec<(String, String)> {
    let mut conn = connect(server, false);
    let mut answers = Vec::new();
    let mut record = |label: String, answer: String| answers.push((label, answer));
    for (cn, _) in dynamic_groups() {
        let dn = format!("cn={cn},{}", groups());
        record(
            format!("base member {cn}"),
            format!("{:?}", search(&mut conn, &dn, Scope::Base, "(objectClass=*)", &["member"])),
        );
        record(
            format!("base * {cn}"),
            format!("{:?}", search(&mut conn, &dn, Scope::Base, "(objectClass=*)", &["*"])),
        );
    }
    for (cn, _) in dynamic_groups() {
        // typesOnly: the member type alone on a group with members.
        let dn = format!("cn={cn},{}", groups());
        let found = conn
            .with_search_options(ldap3::SearchOptions::new().typesonly(true))
            .with_timeout(Duration::from_secs(10))
            .search(&dn, Scope::Base, "(objectClass=*)", vec!["member", "cn"])
            .map(|r| {
                r.0.into_iter()
                    .map(SearchEntry::construct)
                    .map(|e| e.attrs.into_keys().map(|k| k.to_ascii_lowercase()).collect::<BTreeSet<_>>())
                    .collect::<Vec<_>>()
            });
        record(format!("typesOnly {cn}"), format!("{found:?}"));
    }
    record(
        "groups one-level".into(),
        format!(
            "{:?}",
            search(&mut conn, &groups(), Scope::OneLevel, "(objectClass=groupOfURLs)", &["member", "cn"])
        ),
    );
    for who in ["alice", "dave", "bob"] {
        let dn =
            format!("uid={who},{}", if who == "dave" { format!("ou=sub,{}", people()) } else { people() });
        record(
            format!("(member={who})"),
            format!("{:?}", search(&mut conn, SUFFIX, Scope::Subtree, &format!("(member={dn})"), &["1.1"])),
        );
    }
    record(
        "(member=*)".into(),
        format!("{:?}", search(&mut conn, SUFFIX, Scope::Subtree, "(member=*)", &["1.1"])),
    );
    record(
        "(member=nested group)".into(),
        format!(
            "{:?}",
            search(&mut conn, SUFFIX, Scope::Subtree, &format!("(member=cn=sub,{})", groups()), &["1.1"])
        ),
    );
    for (cn, who) in
        [("sub", "alice"), ("filter", "bob"), ("empty", "alice"), ("base", "alice"), ("nested", "cn=sub")]
    {
        let group = format!("cn={cn},{}", groups());
        let value = if who.starts_with("cn=") {
            format!("{who},{}", groups())
        } else {
            format!("uid={who},{}", people())
        };
        let rc = conn
            .with_timeout(Duration::from_secs(10))
            .compare(&group, "member", value.as_str())
            .map(|r| r.0.rc)
            .unwrap_or(u32::MAX);
        record(format!("compare {cn} member {who}"), format!("rc={rc}"));
    }
    answers
}

#[test]
fn dynlist_matches_slapd() {
    let slapd = servers::start_slapd_with_overlay(
        "dynlist",
        "overlay dynlist\ndynlist-attrset groupOfURLs memberURL member\n",
    );
    let ferrodir = servers::start_ferrodir_with(None, "");
    for server in [&slapd, &ferrodir] {
        populate(&mut connect(server, true));
    }
    let (theirs, ours) = (script(&slapd), script(&ferrodir));
    assert_eq!(theirs.len(), ours.len());
    // The script must have found members at all, or it proves nothing.
    let sub = theirs.iter().find(|(l, _)| l == "base member sub").map(|(_, a)| a.clone()).unwrap_or_default();
    assert!(sub.contains("uid=alice"), "slapd computed no members: {sub}");
    // Known, with the reason in docs/CONFORMANCE.md ("Dynamic groups"): slapd's dynlist
    // answers a Compare through a search whose memberURL filter it leaves unset when the
    // URL has none, so it finds no member there although its own searches list alice.
    // Ferrodir's Compare agrees with what a search returns (RFC 4511 §4.10).
    let known = [("compare base member alice", "rc=5", "rc=6")];
    for (label, slapd_says, ferrodir_says) in known {
        let got =
            |answers: &[(String, String)]| answers.iter().find(|(l, _)| l == label).map(|(_, a)| a.clone());
        assert_eq!(got(&theirs).as_deref(), Some(slapd_says), "slapd no longer answers {label} as recorded");
        assert_eq!(got(&ours).as_deref(), Some(ferrodir_says), "ferrodir's answer to {label}");
    }
    let differences: Vec<String> = theirs
        .iter()
        .zip(&ours)
        .filter(|((label, _), _)| !known.iter().any(|(k, _, _)| k == label))
        .filter(|(a, b)| a != b)
        .map(|((label, a), (_, b))| format!("{label}:\n  slapd:    {a}\n  ferrodir: {b}"))
        .collect();
    assert!(differences.is_empty(), "dynlist differs from slapd:\n{}", differences.join("\n"));
}

/// Access rules naming a dynamic group, against slapd: `group/groupOfURLs/memberURL=` counts
/// the entries its memberURLs select (slapd's backend_group evaluates URL-valued groups); a
/// plain `group=` (groupOfNames/member) does not count a dynamic group's computed members.
#[test]
fn dynamic_groups_in_access_rules_match_slapd() {
    let vault = |n: u8| format!("ou=vault{n},{SUFFIX}");
    let group = format!("cn=staff,{}", groups());
    let slapd_access = vec![
        format!(
            "access to dn.subtree=\"{}\" by group/groupOfURLs/memberURL=\"{group}\" read by * none",
            vault(1)
        ),
        format!("access to dn.subtree=\"{}\" by group=\"{group}\" read by * none", vault(2)),
        "access to * by * read".to_string(),
    ];
    let ferrodir_access = format!(
        "[[access_rules]]\nto = 'dn.subtree=\"{}\"'\nby = ['group/groupOfURLs/memberURL=\"{group}\" read', '* none']\n\
         [[access_rules]]\nto = 'dn.subtree=\"{}\"'\nby = ['group=\"{group}\" read', '* none']\n\
         [[access_rules]]\nto = '*'\nby = ['* read']\n",
        vault(1),
        vault(2)
    );
    let slapd = servers::start_slapd_with_overlay_and_access(
        "dynlist",
        "overlay dynlist\ndynlist-attrset groupOfURLs memberURL member\n",
        &slapd_access,
    );
    let ferrodir = servers::start_ferrodir_with(None, &ferrodir_access);
    let v = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<HashSet<String>>();
    let mut answers: Vec<Vec<String>> = Vec::new();
    for server in [&slapd, &ferrodir] {
        let mut conn = connect(server, true);
        let mut add = |dn: String, attrs: Vec<(&str, HashSet<String>)>| {
            let attrs: Vec<(String, HashSet<String>)> =
                attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let rc =
                conn.with_timeout(Duration::from_secs(10)).add(&dn, attrs).map(|r| r.rc).unwrap_or(u32::MAX);
            assert_eq!(rc, 0, "add {dn}");
        };
        add(
            SUFFIX.to_string(),
            vec![
                ("objectClass", v(&["dcObject", "organization"])),
                ("dc", v(&["example"])),
                ("o", v(&["x"])),
            ],
        );
        for ou in ["people", "groups", "vault1", "vault2"] {
            add(
                format!("ou={ou},{SUFFIX}"),
                vec![("objectClass", v(&["organizationalUnit"])), ("ou", v(&[ou]))],
            );
        }
        for (uid, kind) in [("alice", "staff"), ("bob", "guest")] {
            add(
                format!("uid={uid},{}", people()),
                vec![
                    ("objectClass", v(&["inetOrgPerson"])),
                    ("uid", v(&[uid])),
                    ("cn", v(&[uid])),
                    ("sn", v(&[uid])),
                    ("employeeType", v(&[kind])),
                    ("userPassword", v(&[uid])),
                ],
            );
        }
        add(
            group.clone(),
            vec![
                ("objectClass", v(&["groupOfURLs"])),
                ("cn", v(&["staff"])),
                ("memberURL", v(&[&format!("ldap:///{}??one?(employeeType=staff)", people())])),
            ],
        );
        let mut answer = Vec::new();
        for uid in ["alice", "bob"] {
            let settings = LdapConnSettings::new().set_conn_timeout(Duration::from_secs(10));
            let mut user =
                LdapConn::with_settings(settings, &format!("ldap://{}", server.addr)).expect("connect");
            let bound =
                user.simple_bind(&format!("uid={uid},{}", people()), uid).map(|r| r.rc).unwrap_or(u32::MAX);
            assert_eq!(bound, 0, "bind as {uid}");
            for n in [1, 2] {
                let found = search(&mut user, &vault(n), Scope::Base, "(objectClass=*)", &["1.1"]);
                answer.push(format!("{uid} vault{n}: {:?}", found.map(|f| f.len())));
            }
        }
        answers.push(answer);
    }
    // slapd lets alice (selected by the memberURL) into vault1 and nobody into vault2.
    assert!(answers[0].contains(&"alice vault1: Ok(1)".to_string()), "slapd: {:?}", answers[0]);
    assert_eq!(answers[0], answers[1], "slapd, then ferrodir");
}

/// memberOf from dynamic groups against slapd with `dynlist-attrset groupOfURLs memberURL
/// member+memberOf` (ferrodir's `memberof`, on by default, adds the dynamic groups): each
/// person's memberOf by name and with `+`, `(memberOf=G)` for dynamic groups, and a
/// Compare of memberOf.
#[test]
fn dynlist_member_of_matches_slapd() {
    let slapd = servers::start_slapd_with_overlay(
        "dynlist",
        "overlay dynlist\ndynlist-attrset groupOfURLs memberURL member+memberOf\n",
    );
    let ferrodir = servers::start_ferrodir_with(None, "");
    let mut answers: Vec<Vec<(String, String)>> = Vec::new();
    for server in [&slapd, &ferrodir] {
        populate(&mut connect(server, true));
        let mut conn = connect(server, false);
        let mut answer = Vec::new();
        let sub = format!("ou=sub,{}", people());
        for (uid, parent) in
            [("alice", people()), ("bob", people()), ("dave", sub.clone()), ("erin", sub.clone())]
        {
            let dn = format!("uid={uid},{parent}");
            for list in [&["memberOf"][..], &["+"]] {
                let found = search(&mut conn, &dn, Scope::Base, "(objectClass=*)", list).map(|entries| {
                    entries
                        .into_values()
                        .map(|attrs| attrs.get("memberof").cloned().unwrap_or_default())
                        .collect::<Vec<_>>()
                });
                let found = found.map(|sets| {
                    sets.into_iter()
                        .map(|s| s.into_iter().map(|v| norm(&v)).collect::<BTreeSet<_>>())
                        .collect::<Vec<_>>()
                });
                answer.push((format!("{uid} {list:?}"), format!("{found:?}")));
            }
        }
        for cn in ["sub", "filter", "overlap", "empty", "nested"] {
            let filter = format!("(memberOf=cn={cn},{})", groups());
            let found = search(&mut conn, SUFFIX, Scope::Subtree, &filter, &["1.1"])
                .map(|e| e.into_keys().collect::<Vec<_>>());
            answer.push((filter, format!("{found:?}")));
        }
        for (uid, cn) in [("alice", "filter"), ("bob", "filter")] {
            let rc = conn
                .with_timeout(Duration::from_secs(10))
                .compare(
                    &format!("uid={uid},{}", people()),
                    "memberOf",
                    format!("cn={cn},{}", groups()).as_str(),
                )
                .map(|r| r.0.rc)
                .unwrap_or(u32::MAX);
            answer.push((format!("compare {uid} memberOf {cn}"), format!("rc={rc}")));
        }
        answers.push(answer);
    }
    // Known, with the reason in docs/CONFORMANCE.md ("Dynamic groups"): slapd's dynlist
    // leaves Compare of memberOf to the stored values (none here), so it answers
    // noSuchAttribute where its own searches list the group; ferrodir's Compare agrees with
    // its searches (RFC 4511 §4.10).
    let known = [
        ("compare alice memberOf filter", "rc=16", "rc=6"),
        ("compare bob memberOf filter", "rc=16", "rc=5"),
    ];
    for (label, slapd_says, ferrodir_says) in known {
        for (answer, says) in [(&answers[0], slapd_says), (&answers[1], ferrodir_says)] {
            let got = answer.iter().find(|(l, _)| l == label).map(|(_, a)| a.as_str());
            assert_eq!(got, Some(says), "{label}: {answer:?}");
        }
    }
    let alice = answers[0].first().map(|(_, a)| a.clone()).unwrap_or_default();
    assert!(alice.contains("cn=sub,ou=groups"), "slapd listed no dynamic group for alice: {alice}");
    let differences: Vec<String> = answers[0]
        .iter()
        .zip(&answers[1])
        .filter(|((label, _), _)| !known.iter().any(|(k, _, _)| k == label))
        .filter(|(a, b)| a != b)
        .map(|((label, a), (_, b))| format!("{label}:\n  slapd:    {a}\n  ferrodir: {b}"))
        .collect();
    assert!(
        differences.is_empty(),
        "memberOf from dynamic groups differs from slapd:\n{}",
        differences.join("\n")
    );
}
