//! Issue #9 through real clients: filters honour read access (an assertion on an attribute
//! the requester may not search is Undefined, so `(&(uid=bob)(userPassword=password))` is no
//! password oracle), with and without an index on userPassword; and long searches give the
//! same answers wherever they run (the search pool, or the worker thread), with their limits.

use std::collections::BTreeSet;

use ldap3::{Mod, Scope, SearchEntry};

use crate::harness::{connect_url, tool, Client, Server, ADMIN_DN, ADMIN_PW, BASE};

const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";

fn config(extra: &str) -> String {
    format!(
        "shards = 4\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\nexample_data = true\n\
         {extra}\n[log]\nlevel = \"warn\"\n"
    )
}

fn bound(url: &str, dn: &str, password: &str) -> Client {
    let mut client = connect_url(url);
    if !dn.is_empty() {
        let result = client.simple_bind(dn, password).expect("bind");
        assert_eq!(result.rc, 0, "bind as {dn}: {result:?}");
    }
    client
}

/// The DNs a search returns (lowercased), and its result code.
fn dns(client: &mut Client, base: &str, scope: Scope, filter: &str) -> (BTreeSet<String>, u32) {
    let (entries, result) = client.search(base, scope, filter, vec!["1.1"]).expect("search").success_or_rc();
    let names = entries.into_iter().map(|e| SearchEntry::construct(e).dn.to_lowercase()).collect();
    (names, result)
}

trait SuccessOrRc {
    fn success_or_rc(self) -> (Vec<ldap3::ResultEntry>, u32);
}

impl SuccessOrRc for ldap3::SearchResult {
    fn success_or_rc(self) -> (Vec<ldap3::ResultEntry>, u32) {
        (self.0, self.1.rc)
    }
}

/// Filters on userPassword, each with whether the rootDN (who may read it) finds bob.
const PASSWORD_FILTERS: [(&str, bool); 10] = [
    ("(&(uid=bob)(userPassword=password))", true),
    ("(userPassword=password)", true),
    ("(userPassword=*)", true),
    ("(&(uid=bob)(userPassword=*))", true),
    ("(userPassword~=password)", true),
    ("(userPassword:octetStringMatch:=password)", true),
    ("(&(uid=bob)(:octetStringMatch:=password))", true),
    ("(&(uid=bob)(!(userPassword=wrong)))", true),
    // No substring or ordering rule on userPassword: Undefined for everyone.
    ("(userPassword=pass*)", false),
    ("(userPassword>=a)", false),
];

fn check_password_filters(server: &Server) {
    let url = server.url();
    let mut root = bound(&url, ADMIN_DN, ADMIN_PW);
    let mut anonymous = bound(&url, "", "");
    let mut alice = bound(&url, ALICE, "password");
    for (filter, root_finds_bob) in PASSWORD_FILTERS {
        let (found, rc) = dns(&mut root, BASE, Scope::Subtree, filter);
        assert_eq!(rc, 0, "{filter} as the rootDN");
        assert_eq!(found.contains(BOB), root_finds_bob, "{filter} as the rootDN: {found:?}");
        for (who, client) in [("anonymous", &mut anonymous), ("alice", &mut alice)] {
            for (base, scope) in
                [(BASE, Scope::Subtree), ("ou=people,dc=example,dc=com", Scope::OneLevel), (BOB, Scope::Base)]
            {
                let (found, rc) = dns(client, base, scope, filter);
                assert_eq!(rc, 0, "{filter} as {who}");
                // The default rules (Debian's) let alice search her own password only.
                let own = |dn: &String| who == "alice" && dn == ALICE;
                assert!(found.iter().all(own), "{filter} as {who} from {base} disclosed {found:?}");
            }
        }
    }
    // NOT of an Undefined assertion stays Undefined: no entry at all, not every entry.
    let (all, _) = dns(&mut root, BASE, Scope::Subtree, "(!(userPassword=wrong))");
    assert!(all.len() >= 4, "the rootDN sees entries without that password: {all:?}");
    let (none, _) = dns(&mut anonymous, BASE, Scope::Subtree, "(!(userPassword=wrong))");
    assert!(none.is_empty(), "{none:?}");
    // Other attributes still work for everyone, in the same filters.
    let (found, _) = dns(&mut anonymous, BASE, Scope::Subtree, "(|(userPassword=password)(uid=bob))");
    assert_eq!(found, BTreeSet::from([BOB.to_string()]));

    // The same with OpenLDAP's ldapsearch, as a new user would try it.
    let (code, out, err) = tool(
        "ldapsearch",
        &["-x", "-LLL", "-H", &url, "-b", BASE, "(&(uid=bob)(userPassword=password))", "dn"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(!out.to_lowercase().contains("uid=bob"), "ldapsearch as anonymous found bob: {out}");
}

#[test]
fn filters_on_unreadable_attributes_are_undefined() {
    let server = Server::start_with_config(&config(""));
    check_password_filters(&server);
}

/// No index-only shortcut (postings, Bloom pruning) skips the check.
#[test]
fn filters_on_unreadable_attributes_are_undefined_when_indexed() {
    let index = r#"index = ["objectClass eq", "uid,cn,sn,mail eq", "userPassword eq,pres"]"#;
    let server = Server::start_with_config(&config(index));
    check_password_filters(&server);
}

/// Adds `count` people under ou=people with description "d<i>" (unindexed).
fn populate(client: &mut Client, count: usize) {
    for i in 0..count {
        let dn = format!("uid=scan{i},ou=people,{BASE}");
        let description = format!("d{i}");
        let uid = format!("scan{i}");
        let result = client
            .add(
                &dn,
                vec![
                    ("objectClass", ["inetOrgPerson"].into()),
                    ("uid", [uid.as_str()].into()),
                    ("cn", [uid.as_str()].into()),
                    ("sn", ["scan"].into()),
                    ("description", [description.as_str()].into()),
                ],
            )
            .expect("add");
        assert_eq!(result.rc, 0, "add {dn}: {result:?}");
    }
}

fn check_scans(server: &Server) {
    let url = server.url();
    let mut root = bound(&url, ADMIN_DN, ADMIN_PW);
    populate(&mut root, 120);
    let mut anonymous = bound(&url, "", "");
    // Unindexed: every shard's part walks its scope.
    let (found, rc) = dns(&mut anonymous, BASE, Scope::Subtree, "(description=d1*)");
    assert_eq!(rc, 0);
    let want: BTreeSet<String> = (0..120)
        .filter(|i| format!("d{i}").starts_with("d1"))
        .map(|i| format!("uid=scan{i},ou=people,{BASE}"))
        .collect();
    assert_eq!(found, want);
    let (none, rc) = dns(&mut anonymous, BASE, Scope::Subtree, "(description=nomatch)");
    assert_eq!((none.len(), rc), (0, 0));
    // A size limit on an unindexed search: exactly that many entries, then 4.
    let (entries, rc) = anonymous
        .with_search_options(ldap3::SearchOptions::new().sizelimit(5))
        .search(BASE, Scope::Subtree, "(description=*)", vec!["1.1"])
        .expect("search")
        .success_or_rc();
    assert_eq!((entries.len(), rc), (5, 4));
    // A large indexed candidate set (every person) goes to the pool too.
    let (people, rc) = dns(&mut root, BASE, Scope::Subtree, "(&(objectClass=person)(sn=scan))");
    assert_eq!((people.len(), rc), (120, 0));
    // Writes go on between scans and are seen by the next one.
    let dn = format!("uid=scan7,ou=people,{BASE}");
    let result = root.modify(&dn, vec![Mod::Replace("description", ["changed"].into())]).expect("modify");
    assert_eq!(result.rc, 0);
    let (found, _) = dns(&mut anonymous, BASE, Scope::Subtree, "(description=changed)");
    assert_eq!(found, BTreeSet::from([dn.to_lowercase()]));
}

#[test]
fn scans_on_the_search_pool() {
    let server = Server::start_with_config(&config("search_scans = \"pool\"\nsearch_threads = 2"));
    check_scans(&server);
}

#[test]
fn scans_on_the_worker_threads() {
    let server = Server::start_with_config(&config("search_scans = \"worker\"\nremote_reads = \"message\""));
    check_scans(&server);
}

/// `unindexed_search = "refuse"` (389-ds's require-index) for anonymous only.
#[test]
fn unindexed_searches_refused_for_a_class() {
    let text = format!(
        "shards = 2\nroot_dn = \"{ADMIN_DN}\"\nroot_password = \"{ADMIN_PW}\"\nexample_data = true\n\
         [limits.anonymous]\nunindexed_search = \"refuse\"\n[log]\nlevel = \"warn\"\n"
    );
    let server = Server::start_with_config(&text);
    let url = server.url();
    let mut anonymous = bound(&url, "", "");
    let result = anonymous.search(BASE, Scope::Subtree, "(description=x)", vec!["1.1"]).expect("search");
    assert_eq!(result.1.rc, 53, "{:?}", result.1);
    assert!(result.1.text.contains("not indexed"), "{:?}", result.1);
    let (found, rc) = dns(&mut anonymous, BASE, Scope::Subtree, "(uid=bob)");
    assert_eq!((found, rc), (BTreeSet::from([BOB.to_string()]), 0));
    // A base lookup is never unindexed.
    let (found, rc) = dns(&mut anonymous, BOB, Scope::Base, "(description=x)");
    assert_eq!((found.len(), rc), (0, 0));
    let mut alice = bound(&url, ALICE, "password");
    let (_, rc) = dns(&mut alice, BASE, Scope::Subtree, "(description=x)");
    assert_eq!(rc, 0, "authenticated users keep the default (allow)");
}
