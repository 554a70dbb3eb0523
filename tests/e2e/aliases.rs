//! Alias dereferencing through real clients over eight shards: `ldapsearch -a` (never,
//! search, find, always) and python ldap3's `dereference_aliases` against a tree with an
//! alias to a leaf, two to one entry, one to a subtree, a chain, a loop, a dangling alias
//! and one to a subtree only the rootDN may read. Followed aliases' targets come back once
//! each and alias entries not at all; a loop or a dangling base is aliasProblem (33); the
//! sizeLimit counts across the followed scopes; paged, sorted and VLV searches follow them
//! as a plain search does; the access rules hide what they hide behind an
//! alias too. The comparison with slapd is tests/conformance/aliases.rs.

use std::collections::BTreeSet;
use std::process::Command;

use crate::harness::{tool, Server, ADMIN_DN, ADMIN_PW, BASE};

const CONFIG: &str = r#"
shards = 8
suffixes = ["dc=example,dc=com"]
root_dn = "cn=admin,dc=example,dc=com"
root_password = "secret"
example_data = false
[[access_rules]]
to = 'dn.subtree="ou=secret,dc=example,dc=com"'
by = ['* none']
[[access_rules]]
to = 'dn.exact="cn=private,ou=links,dc=example,dc=com" attrs=aliasedObjectName'
by = ['* none']
[[access_rules]]
to = '*'
by = ['* read']
[log]
level = "warn"
"#;

fn dn(rdns: &str) -> String {
    format!("{rdns},{BASE}").to_ascii_lowercase()
}

fn tree() -> String {
    let mut ldif =
        format!("dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\ndc: example\no: x\n\n");
    for ou in ["people", "groups", "links", "secret"] {
        ldif.push_str(&format!("dn: ou={ou},{BASE}\nobjectClass: organizationalUnit\nou: {ou}\n\n"));
    }
    for (rdn, parent) in
        [("alice", "people"), ("bob", "people"), ("g1", "groups"), ("g2", "groups"), ("hidden", "secret")]
    {
        ldif.push_str(&format!(
            "dn: cn={rdn},ou={parent},{BASE}\nobjectClass: inetOrgPerson\ncn: {rdn}\nsn: {rdn}\n\n"
        ));
    }
    let aliases = [
        ("toalice", "cn=alice,ou=people"),
        ("alsoalice", "cn=alice,ou=people"),
        ("togroups", "ou=groups"),
        ("chain", "cn=togroups,ou=links"),
        ("loopa", "cn=loopb,ou=links"),
        ("loopb", "cn=loopa,ou=links"),
        ("dangling", "cn=nobody,ou=people"),
        ("tosecret", "ou=secret"),
        ("private", "cn=bob,ou=people"),
    ];
    for (cn, target) in aliases {
        ldif.push_str(&format!(
            "dn: cn={cn},ou=links,{BASE}\nobjectClass: alias\nobjectClass: extensibleObject\ncn: {cn}\n\
             aliasedObjectName: {target},{BASE}\n\n"
        ));
    }
    ldif.push_str(&format!("dn: ou=many,{BASE}\nobjectClass: organizationalUnit\nou: many\n\n"));
    for i in 0..=ALIASES_MAX {
        ldif.push_str(&format!(
            "dn: cn=a{i},ou=many,{BASE}\nobjectClass: alias\nobjectClass: extensibleObject\ncn: a{i}\n\
             aliasedObjectName: cn=bob,ou=people,{BASE}\n\n"
        ));
    }
    ldif
}

/// router::op::search::aliases::ALIASES_MAX: how many aliases one search may meet.
const ALIASES_MAX: usize = 256;

/// `ldapsearch` as `who` (None: anonymous) with `args`: its exit code (the result code) and
/// the DNs returned, lowercased, in order.
fn ldapsearch(server: &Server, who: Option<(&str, &str)>, args: &[&str]) -> (i32, Vec<String>) {
    let url = server.url();
    let mut all = vec!["-x", "-LLL", "-o", "ldif-wrap=no", "-H", url.as_str()];
    if let Some((dn, pw)) = who {
        all.extend(["-D", dn, "-w", pw]);
    }
    all.extend(args);
    all.push("1.1");
    let (code, out, _) = tool("ldapsearch", &all, None);
    let dns = out.lines().filter_map(|l| l.strip_prefix("dn: ")).map(str::to_ascii_lowercase).collect();
    (code, dns)
}

fn set(dns: &[String]) -> BTreeSet<String> {
    dns.iter().cloned().collect()
}

fn expect(dns: &[&str]) -> BTreeSet<String> {
    dns.iter().map(|d| dn(d)).collect()
}

#[test]
fn aliases_are_followed_once_with_loops_and_limits_as_slapd() {
    let server = Server::start_with_config(CONFIG);
    let (code, _, err) =
        tool("ldapadd", &["-x", "-H", &server.url(), "-D", ADMIN_DN, "-w", ADMIN_PW], Some(&tree()));
    assert_eq!(code, 0, "ldapadd of a tree with alias entries: {err}");
    let root = Some((ADMIN_DN, ADMIN_PW));
    let links = dn("ou=links");

    // An alias has no subordinates: an add or a move below one is aliasProblem (33).
    let url = server.url();
    let admin = ["-x", "-H", url.as_str(), "-D", ADMIN_DN, "-w", ADMIN_PW];
    let below = format!("dn: cn=under,cn=toalice,ou=links,{BASE}\nobjectClass: person\ncn: under\nsn: u\n");
    assert_eq!(tool("ldapadd", &admin, Some(&below)).0, 33, "add below an alias");
    let moved = format!(
        "dn: cn=g2,ou=groups,{BASE}\nchangetype: modrdn\nnewrdn: cn=g2\ndeleteoldrdn: 0\n\
         newsuperior: cn=toalice,ou=links,{BASE}\n"
    );
    assert_eq!(tool("ldapmodify", &admin, Some(&moved)).0, 33, "move below an alias");

    // Never: the aliases are ordinary entries.
    let (code, dns) = ldapsearch(&server, root, &["-a", "never", "-s", "one", "-b", &links]);
    assert_eq!(code, 0);
    assert_eq!(dns.len(), 9, "{dns:?}");

    // Always, subtree: each target's subtree once, no alias entry, the loop and the
    // dangling alias passed over.
    let (code, dns) = ldapsearch(&server, root, &["-a", "always", "-s", "sub", "-b", &links]);
    assert_eq!(code, 0);
    let everything = expect(&[
        "ou=links",
        "cn=alice,ou=people",
        "cn=bob,ou=people",
        "ou=groups",
        "cn=g1,ou=groups",
        "cn=g2,ou=groups",
        "ou=secret",
        "cn=hidden,ou=secret",
    ]);
    assert_eq!(set(&dns), everything);
    assert_eq!(dns.len(), everything.len(), "every entry once: {dns:?}");

    // Searching, one level: the targets themselves.
    let (code, dns) = ldapsearch(&server, root, &["-a", "search", "-s", "one", "-b", &links]);
    assert_eq!(code, 0);
    assert_eq!(set(&dns), expect(&["cn=alice,ou=people", "cn=bob,ou=people", "ou=groups", "ou=secret"]));
    assert_eq!(dns.len(), 4, "{dns:?}");

    // Children (ldapsearch -s children), as slapd: the targets' children, not the targets.
    let (code, dns) = ldapsearch(&server, root, &["-a", "search", "-s", "children", "-b", &links]);
    assert_eq!(code, 0);
    assert_eq!(set(&dns), expect(&["cn=g1,ou=groups", "cn=g2,ou=groups", "cn=hidden,ou=secret"]));

    // Anonymous: what the rules hide stays hidden behind an alias, and an alias whose
    // aliasedObjectName anonymous may not read (cn=private, to bob) is not followed.
    let (code, dns) = ldapsearch(&server, None, &["-a", "always", "-s", "sub", "-b", &links]);
    assert_eq!(code, 0);
    let visible =
        expect(&["ou=links", "cn=alice,ou=people", "ou=groups", "cn=g1,ou=groups", "cn=g2,ou=groups"]);
    assert_eq!(set(&dns), visible);

    let private = dn("cn=private,ou=links");
    let (code, _) = ldapsearch(&server, None, &["-a", "find", "-s", "base", "-b", &private]);
    assert_eq!(code, 50, "finding through an alias anonymous may not read");
    let (code, dns) = ldapsearch(&server, root, &["-a", "find", "-s", "base", "-b", &private]);
    assert_eq!((code, dns), (0, vec![dn("cn=bob,ou=people")]));

    // Too many aliases in one search: adminLimitExceeded.
    let (code, dns) = ldapsearch(&server, root, &["-a", "search", "-s", "one", "-b", &dn("ou=many")]);
    assert_eq!(code, 11, "{} aliases: {dns:?}", ALIASES_MAX + 1);
    let (code, dns) = ldapsearch(&server, root, &["-a", "never", "-s", "one", "-b", &dn("ou=many")]);
    assert_eq!((code, dns.len()), (0, ALIASES_MAX + 1));

    // Finding the base: a chain to its target; a loop and a dangling alias are aliasProblem.
    let (code, dns) =
        ldapsearch(&server, root, &["-a", "find", "-s", "base", "-b", &dn("cn=chain,ou=links")]);
    assert_eq!((code, dns), (0, vec![dn("ou=groups")]));
    for base in ["cn=loopa,ou=links", "cn=dangling,ou=links"] {
        let (code, dns) = ldapsearch(&server, root, &["-a", "always", "-s", "sub", "-b", &dn(base)]);
        assert_eq!(code, 33, "{base}: {dns:?}");
    }

    // The sizeLimit counts across the scopes followed.
    let (code, dns) = ldapsearch(&server, root, &["-a", "always", "-z", "3", "-s", "sub", "-b", &links]);
    assert_eq!((code, dns.len()), (4, 3), "{dns:?}");
    let (code, dns) = ldapsearch(&server, root, &["-a", "always", "-z", "8", "-s", "sub", "-b", &links]);
    assert_eq!((code, dns.len()), (0, 8), "exactly the limit is no excess: {dns:?}");
    let (code, dns) = ldapsearch(&server, root, &["-a", "search", "-z", "2", "-s", "one", "-b", &links]);
    assert_eq!((code, dns.len()), (4, 2), "a one-level search's targets count too: {dns:?}");

    // Paged, sorted and VLV searches follow aliases as a plain search does: the same
    // entries, each once, whatever the page size (pages of 1 cross from one scope followed
    // to the next, and through a one-level search's targets one by one).
    for (deref, scope, base) in [
        ("always", "sub", links.as_str()),
        ("search", "one", links.as_str()),
        ("search", "sub", links.as_str()),
        ("always", "one", links.as_str()),
    ] {
        let (code, plain) = ldapsearch(&server, root, &["-a", deref, "-s", scope, "-b", base]);
        assert_eq!(code, 0, "{deref} {scope} {base}");
        assert!(plain.len() >= 3, "{plain:?}");
        for size in ["1", "2", "5"] {
            let paging = format!("pr={size}/noprompt");
            let (code, paged) =
                ldapsearch(&server, root, &["-a", deref, "-E", &paging, "-s", scope, "-b", base]);
            assert_eq!(code, 0, "{deref} {scope} {base} {paging}");
            assert_eq!(paged.len(), set(&paged).len(), "each entry once: {paged:?}");
            assert_eq!(set(&paged), set(&plain), "{deref} {scope} {base} {paging}");
        }
        let (code, sorted) = ldapsearch(
            &server,
            root,
            &["-a", deref, "-E", "sss=cn:caseIgnoreOrderingMatch", "-s", scope, "-b", base],
        );
        assert_eq!((code, sorted.len()), (0, plain.len()), "{deref} {scope} {base} sorted: {sorted:?}");
        assert_eq!(set(&sorted), set(&plain));
        let (code, sorted_paged) = ldapsearch(
            &server,
            root,
            &[
                "-a",
                deref,
                "-E",
                "sss=cn:caseIgnoreOrderingMatch",
                "-E",
                "pr=2/noprompt",
                "-s",
                scope,
                "-b",
                base,
            ],
        );
        assert_eq!((code, sorted_paged.clone()), (0, sorted.clone()), "sorted pages: the same order");
        let (code, window) = ldapsearch(
            &server,
            root,
            &[
                "-a",
                deref,
                "-E",
                "sss=cn:caseIgnoreOrderingMatch",
                "-E",
                "vlv=0/2/1/0",
                "-s",
                scope,
                "-b",
                base,
            ],
        );
        // ldapsearch asks for window after window until one lies past the end (76).
        assert!(code == 0 || code == 76, "vlv {code}: {window:?}");
        assert_eq!(window[..3], sorted[..3], "the first VLV window is the sorted list's first three");
    }
    // A paged search that meets no alias pages as always.
    let (code, dns) = ldapsearch(
        &server,
        root,
        &["-a", "always", "-E", "pr=2/noprompt", "-s", "sub", "-b", &dn("ou=groups")],
    );
    assert_eq!((code, dns.len()), (0, 3), "{dns:?}");

    // python ldap3, whose default is DEREF_ALWAYS, and its DEREF_NEVER.
    let script = r#"
import sys, ldap3
server = ldap3.Server(sys.argv[1])
conn = ldap3.Connection(server, auto_bind=True)
for deref in (ldap3.DEREF_ALWAYS, ldap3.DEREF_NEVER):
    conn.search(sys.argv[2], '(objectClass=*)', search_scope=ldap3.SUBTREE, dereference_aliases=deref, attributes=['1.1'])
    print(conn.result['result'], '|'.join(sorted(r['dn'].lower() for r in conn.response if r['type'] == 'searchResEntry')))
"#;
    let output = Command::new("/usr/bin/python3")
        .args(["-c", script, &server.url(), &links])
        .output()
        .expect("run python3 (python3-ldap3)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{text} {}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = text.lines().collect();
    let joined = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join("|");
    assert_eq!(lines.first().copied(), Some(format!("0 {}", joined(&visible)).as_str()), "{text}");
    let never = lines.get(1).copied().unwrap_or_default();
    assert!(never.starts_with("0 ") && never.contains(&dn("cn=loopa,ou=links")), "{text}");
}
