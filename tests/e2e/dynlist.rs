//! Dynamic groups (slapo-dynlist's groupOfURLs/memberURL/member) through OpenLDAP's tools
//! over eight shards: member values computed from memberURLs on a base search, a subtree
//! search, a sorted search and every page of a paged search; `(member=DN)` filters finding dynamic groups;
//! ldapcompare; the access rules hiding members in a subtree anonymous may not read; and
//! `[dynlist] members_max` refusing a group with more members (adminLimitExceeded, 11)
//! while a requester who sees fewer gets them; memberOf and `(memberOf=G)` from dynamic
//! groups; a `group/groupOfURLs/memberURL=` access rule. The comparison with slapd is
//! tests/conformance/dynlist.rs.

use std::collections::{BTreeMap, BTreeSet};

use crate::harness::{tool, Server, ADMIN_DN, ADMIN_PW, BASE};

const CONFIG: &str = r#"
shards = 8
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = false
[dynlist]
members_max = 50
[[access_rules]]
to = 'dn.subtree="ou=secret,dc=example,dc=com"'
by = ['* none']
[[access_rules]]
to = 'dn.subtree="ou=vault,dc=example,dc=com"'
by = ['group/groupOfURLs/memberURL="cn=staff,ou=groups,dc=example,dc=com" read', '* none']
[[access_rules]]
to = '*'
by = ['* read']
[log]
level = "warn"
"#;

/// People in ou=people (visible to all) and in ou=secret (to the rootDN only): 45 + 10 is
/// past members_max (50), 45 is not.
const PEOPLE: usize = 45;
const SECRET: usize = 10;

fn dn(rdns: &str) -> String {
    format!("{rdns},{BASE}").to_ascii_lowercase()
}

fn tree() -> String {
    let mut ldif =
        format!("dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: x\n\n");
    for ou in ["people", "secret", "groups", "vault"] {
        ldif.push_str(&format!("dn: ou={ou},{BASE}\nobjectClass: organizationalUnit\nou: {ou}\n\n"));
    }
    for (ou, count) in [("people", PEOPLE), ("secret", SECRET)] {
        for i in 0..count {
            let kind = if i % 3 == 0 { "staff" } else { "guest" };
            // Two who bind: people0 (staff) and people1 (guest).
            let password = if ou == "people" && i < 2 { "userPassword: pw\n" } else { "" };
            ldif.push_str(&format!(
                "dn: uid={ou}{i},ou={ou},{BASE}\nobjectClass: inetOrgPerson\nuid: {ou}{i}\ncn: {ou}{i}\nsn: x\n\
                 employeeType: {kind}\n{password}\n"
            ));
        }
    }
    let groups = [
        ("all", format!("ldap:///{BASE}??sub?(objectClass=inetOrgPerson)")),
        ("staff", format!("ldap:///ou=people,{BASE}??one?(employeeType=staff)")),
        ("secret", format!("ldap:///ou=secret,{BASE}??sub?(objectClass=inetOrgPerson)")),
        ("nobody", format!("ldap:///ou=people,{BASE}??sub?(uid=nobody)")),
    ];
    for (cn, url) in groups {
        ldif.push_str(&format!(
            "dn: cn={cn},ou=groups,{BASE}\nobjectClass: groupOfURLs\ncn: {cn}\nmemberURL: {url}\n\n"
        ));
    }
    ldif
}

/// `ldapsearch` as `who` (None: anonymous): its exit code and, per DN returned (lowercased,
/// in order), its member values (lowercased).
fn ldapsearch(
    server: &Server,
    who: Option<(&str, &str)>,
    args: &[&str],
) -> (i32, Vec<(String, BTreeSet<String>)>) {
    let url = server.url();
    let mut all = vec!["-x", "-LLL", "-o", "ldif-wrap=no", "-H", url.as_str()];
    if let Some((dn, pw)) = who {
        all.extend(["-D", dn, "-w", pw]);
    }
    all.extend(args);
    let (code, out, _) = tool("ldapsearch", &all, None);
    let mut entries: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in out.lines() {
        if let Some(dn) = line.strip_prefix("dn: ") {
            entries.push((dn.to_ascii_lowercase(), BTreeSet::new()));
        } else if let (Some(member), Some(last)) = (line.strip_prefix("member: "), entries.last_mut()) {
            last.1.insert(member.to_ascii_lowercase());
        }
    }
    (code, entries)
}

fn people(ou: &str, range: impl Iterator<Item = usize>) -> BTreeSet<String> {
    range.map(|i| dn(&format!("uid={ou}{i},ou={ou}"))).collect()
}

fn compare(server: &Server, who: Option<(&str, &str)>, group: &str, member: &str) -> i32 {
    let url = server.url();
    let assertion = format!("member:{member}");
    let mut args = vec!["-x", "-H", url.as_str()];
    if let Some((dn, pw)) = who {
        args.extend(["-D", dn, "-w", pw]);
    }
    args.extend([group, assertion.as_str()]);
    tool("ldapcompare", &args, None).0
}

#[test]
fn dynamic_groups_compute_members_across_shards_with_paging_access_and_bounds() {
    let mut server = Server::start_with_config(CONFIG);
    let (code, _, err) =
        tool("ldapadd", &["-x", "-H", &server.url(), "-D", ADMIN_DN, "-w", ADMIN_PW], Some(&tree()));
    assert_eq!(code, 0, "ldapadd of groupOfURLs entries: {err}");
    let root = Some((ADMIN_DN, ADMIN_PW));
    let staff: BTreeSet<String> = people("people", (0..PEOPLE).filter(|i| i % 3 == 0));
    let visible = people("people", 0..PEOPLE);

    // A base search: the members the memberURL selects, on every shard, each once; the
    // memberURL itself is not added when not asked for.
    let group = dn("cn=staff,ou=groups");
    let (code, found) = ldapsearch(&server, None, &["-b", &group, "-s", "base", "member"]);
    assert_eq!(code, 0);
    assert_eq!(found, vec![(group.clone(), staff.clone())]);
    let (_, out, _) =
        tool("ldapsearch", &["-x", "-LLL", "-H", &server.url(), "-b", &group, "-s", "base", "member"], None);
    assert!(!out.to_ascii_lowercase().contains("memberurl"), "memberURL was not asked for: {out}");

    // The access rules: anonymous sees the 45 people of ou=people in cn=all, none of
    // ou=secret, and cn=secret without members; the rootDN would see 55, more than
    // members_max, and is refused.
    let all = dn("cn=all,ou=groups");
    let (code, found) = ldapsearch(&server, None, &["-b", &all, "-s", "base", "member"]);
    assert_eq!(code, 0);
    assert_eq!(found, vec![(all.clone(), visible.clone())]);
    let secret = dn("cn=secret,ou=groups");
    let (code, found) = ldapsearch(&server, None, &["-b", &secret, "-s", "base", "member"]);
    assert_eq!((code, found), (0, vec![(secret.clone(), BTreeSet::new())]));
    let (code, found) = ldapsearch(&server, root, &["-b", &secret, "-s", "base", "member"]);
    assert_eq!((code, found), (0, vec![(secret.clone(), people("secret", 0..SECRET))]));
    let (code, _) = ldapsearch(&server, root, &["-b", &all, "-s", "base", "member"]);
    assert_eq!(code, 11, "55 members, members_max = 50: adminLimitExceeded");

    // A subtree search, and every page of a paged one: each group with its members.
    let expected: BTreeMap<String, BTreeSet<String>> = [
        (dn("ou=groups"), BTreeSet::new()),
        (all.clone(), visible.clone()),
        (group.clone(), staff.clone()),
        (secret.clone(), BTreeSet::new()),
        (dn("cn=nobody,ou=groups"), BTreeSet::new()),
    ]
    .into_iter()
    .collect();
    let groups = dn("ou=groups");
    let (code, found) = ldapsearch(&server, None, &["-b", &groups, "member"]);
    assert_eq!(code, 0);
    assert_eq!(found.into_iter().collect::<BTreeMap<_, _>>(), expected);
    let (code, found) = ldapsearch(&server, None, &["-E", "pr=2/noprompt", "-b", &groups, "member"]);
    assert_eq!(code, 0);
    assert_eq!(found.len(), expected.len(), "every entry once over the pages: {found:?}");
    assert_eq!(found.into_iter().collect::<BTreeMap<_, _>>(), expected);
    let (code, found) = ldapsearch(&server, None, &["-E", "sss=cn:2.5.13.3", "-b", &groups, "member"]);
    assert_eq!(code, 0);
    assert_eq!(found.into_iter().collect::<BTreeMap<_, _>>(), expected, "a sorted search");
    let (code, _) = ldapsearch(&server, root, &["-E", "pr=2/noprompt", "-b", &groups, "member"]);
    assert_eq!(code, 11, "a page holding cn=all as the rootDN");

    // (member=DN): the dynamic groups that DN is in; a hidden member is in none for
    // anonymous.
    let staffer = dn("uid=people3,ou=people");
    let (code, found) = ldapsearch(&server, None, &["-b", BASE, &format!("(member={staffer})"), "1.1"]);
    assert_eq!(code, 0);
    let names: BTreeSet<String> = found.into_iter().map(|(dn, _)| dn).collect();
    assert_eq!(names, [all.clone(), group.clone()].into_iter().collect());
    let hidden = dn("uid=secret1,ou=secret");
    let (code, found) = ldapsearch(&server, None, &["-b", BASE, &format!("(member={hidden})"), "1.1"]);
    assert_eq!((code, found.len()), (0, 0));
    let (code, found) =
        ldapsearch(&server, root, &["-b", &secret, "-s", "base", &format!("(member={hidden})"), "1.1"]);
    assert_eq!((code, found.len()), (0, 1));

    // Compare: TRUE for a computed member, FALSE otherwise (a group with no member too, as
    // slapd), FALSE for a member anonymous may not see.
    assert_eq!(compare(&server, None, &group, &staffer), 6);
    assert_eq!(compare(&server, None, &group, &dn("uid=people1,ou=people")), 5);
    assert_eq!(compare(&server, None, &dn("cn=nobody,ou=groups"), &staffer), 5);
    assert_eq!(compare(&server, None, &all, &hidden), 5);
    assert_eq!(compare(&server, root, &secret, &hidden), 6);

    // memberOf (memberof is on by default): the dynamic groups that select the entry, and
    // (memberOf=G) for a dynamic G, on every page.
    let url = server.url();
    let staffer_base = ["-x", "-LLL", "-H", url.as_str(), "-b", staffer.as_str(), "-s", "base", "memberOf"];
    let (_, out, _) = tool("ldapsearch", &staffer_base, None);
    let member_of: BTreeSet<String> =
        out.lines().filter_map(|l| l.strip_prefix("memberOf: ")).map(str::to_ascii_lowercase).collect();
    assert_eq!(member_of, [all.clone(), group.clone()].into_iter().collect(), "{out}");
    let (code, found) = ldapsearch(
        &server,
        None,
        &["-E", "pr=4/noprompt", "-b", BASE, &format!("(memberOf={group})"), "1.1"],
    );
    let names: BTreeSet<String> = found.into_iter().map(|(dn, _)| dn).collect();
    assert_eq!((code, names), (0, staff.clone()));

    // Access rules: `group/groupOfURLs/memberURL=` admits the entries the group selects.
    let vault = dn("ou=vault");
    let people0 = dn("uid=people0,ou=people");
    let people1 = dn("uid=people1,ou=people");
    let (code, found) = ldapsearch(&server, Some((&people0, "pw")), &["-b", &vault, "-s", "base", "1.1"]);
    assert_eq!((code, found.len()), (0, 1), "people0 is staff");
    let (code, _) = ldapsearch(&server, Some((&people1, "pw")), &["-b", &vault, "-s", "base", "1.1"]);
    assert_eq!(code, 32, "people1 is not staff: the vault is not disclosed");

    // Computed, never stored: an export holds the memberURLs and no member value.
    server.stop();
    let export = server.export();
    assert!(export.contains("memberURL: ldap:///"), "the memberURLs are stored");
    assert!(!export.to_ascii_lowercase().contains("\nmember: "), "no member value is stored");
}
