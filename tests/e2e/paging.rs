//! Simple Paged Results (RFC 2696) against the real binary on four shards: ldapsearch's
//! `-E pr=`, the ldap3 crate's PagedResults adapter, and raw controls for the cookie's
//! edge cases (several paged searches on one connection, another connection, another
//! identity, forged and stale cookies, pageSize 0, concurrent writes between pages).

use std::collections::{BTreeMap, BTreeSet};

use ldap3::adapters::{EntriesOnly, PagedResults as PagedAdapter};
use ldap3::controls::{ControlType, PagedResults, RawControl};
use ldap3::{LdapResult, Mod, Scope, SearchEntry};

use crate::harness::{bound, tool, Client, Server, ADMIN_DN, ADMIN_PW, BASE, TEST_CONFIG};

const PEOPLE: &str = "ou=people,dc=example,dc=com";

/// `count` users uid=pN under ou=people (half of them under ou=a and ou=b below it, so a
/// subtree of ou=people has three containers), added with ldapadd.
fn load_users(server: &Server, count: usize) {
    let mut ldif = String::from(
        "dn: ou=a,ou=people,dc=example,dc=com\nobjectClass: organizationalUnit\nou: a\n\n\
         dn: ou=b,ou=people,dc=example,dc=com\nobjectClass: organizationalUnit\nou: b\n\n",
    );
    for i in 0..count {
        let parent = match i % 4 {
            0 => "ou=a,",
            1 => "ou=b,",
            _ => "",
        };
        ldif.push_str(&format!(
            "dn: uid=p{i},{parent}{PEOPLE}\nobjectClass: inetOrgPerson\nuid: p{i}\ncn: person {i}\nsn: s{}\n\n",
            i % 10
        ));
    }
    let url = server.url();
    let (code, _, err) = tool("ldapadd", &["-x", "-H", &url, "-D", ADMIN_DN, "-w", ADMIN_PW], Some(&ldif));
    assert_eq!(code, 0, "ldapadd: {err}");
}

/// The DNs a plain (unpaged) search as the admin finds.
fn all_dns(client: &mut Client, base: &str, scope: Scope, filter: &str) -> BTreeSet<String> {
    let (entries, result) =
        client.search(base, scope, filter, vec!["1.1"]).expect("search").success().expect(filter);
    assert_eq!(result.rc, 0);
    entries.into_iter().map(|e| SearchEntry::construct(e).dn).collect()
}

/// The paged-results control of a response: (size, cookie).
fn response_cookie(result: &LdapResult) -> Option<Vec<u8>> {
    result.ctrls.iter().find_map(|ctrl| match ctrl {
        ldap3::controls::Control(Some(ControlType::PagedResults), raw) => {
            Some(raw.parse::<PagedResults>().cookie)
        }
        _ => None,
    })
}

/// One page: (DNs, result code, the response's cookie; None when the control is missing).
fn page(
    client: &mut Client,
    base: &str,
    filter: &str,
    size: i32,
    cookie: &[u8],
) -> (Vec<String>, u32, Option<Vec<u8>>) {
    let control: RawControl = PagedResults { size, cookie: cookie.to_vec() }.into();
    let result =
        client.with_controls(control).search(base, Scope::Subtree, filter, vec!["1.1"]).expect("search");
    let (entries, result) = (result.0, result.1);
    let dns = entries.into_iter().map(|e| SearchEntry::construct(e).dn).collect();
    let cookie = response_cookie(&result);
    (dns, result.rc, cookie)
}

/// Runs a paged search to its end; every response must carry the control.
fn page_through(client: &mut Client, base: &str, filter: &str, size: i32) -> (Vec<String>, usize) {
    let (mut dns, mut cookie, mut pages) = (Vec::new(), Vec::new(), 0);
    loop {
        let (found, rc, next) = page(client, base, filter, size, &cookie);
        assert_eq!(rc, 0, "page {pages} of {filter}");
        assert!(found.len() <= size as usize, "a page of {} entries for size {size}", found.len());
        dns.extend(found);
        pages += 1;
        let next = next.expect("every SearchResultDone of a paged search carries the control");
        if next.is_empty() {
            return (dns, pages);
        }
        assert!(pages < 10_000, "paging does not end");
        cookie = next;
    }
}

fn assert_each_once(dns: &[String], expected: &BTreeSet<String>, what: &str) {
    let mut seen = BTreeMap::new();
    for dn in dns {
        *seen.entry(dn.to_lowercase()).or_insert(0) += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{what}: returned more than once: {twice:?}");
    let got: BTreeSet<String> = seen.into_keys().collect();
    let expected: BTreeSet<String> = expected.iter().map(|dn| dn.to_lowercase()).collect();
    assert_eq!(got, expected, "{what}: paged and unpaged searches differ");
}

#[test]
fn paged_searches_return_every_entry_once_across_shards() {
    let server = Server::start();
    load_users(&server, 700);
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let cases = [
        (BASE, "(objectClass=*)"),                 // the suffix: the entries table
        (PEOPLE, "(objectClass=inetOrgPerson)"),   // three containers merged in id order
        (PEOPLE, "(sn=s3)"),                       // an index plan
        (PEOPLE, "(cn=person 1*)"),                // a substring plan
        (PEOPLE, "(|(uid=p1)(uid=p2)(uid=p650))"), // inline on the worker
        ("ou=a,ou=people,dc=example,dc=com", "(!(sn=s2))"),
    ];
    for (base, filter) in cases {
        let expected = all_dns(&mut admin, base, Scope::Subtree, filter);
        assert!(!expected.is_empty(), "{filter}");
        for size in [1, 7, 100, 1000] {
            if size == 1 && expected.len() > 200 {
                continue;
            }
            let (dns, pages) = page_through(&mut admin, base, filter, size);
            assert_each_once(&dns, &expected, &format!("{filter} in pages of {size}"));
            let full_pages = expected.len().div_ceil(size as usize).max(1);
            assert_eq!(pages, full_pages, "{filter} in pages of {size}: the last page knows it is the last");
        }
    }

    // ldapsearch pages with its own cookie handling and the control marked critical.
    let url = server.url();
    let (code, out, err) = tool(
        "ldapsearch",
        &[
            "-x",
            "-H",
            &url,
            "-D",
            ADMIN_DN,
            "-w",
            ADMIN_PW,
            "-b",
            PEOPLE,
            "-E",
            "!pr=64/noprompt",
            "(uid=*)",
            "1.1",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let dns: Vec<String> = out.lines().filter_map(|l| l.strip_prefix("dn: ").map(str::to_string)).collect();
    assert_each_once(&dns, &all_dns(&mut admin, PEOPLE, Scope::Subtree, "(uid=*)"), "ldapsearch -E pr=64");

    // The ldap3 crate's adapter streams every page.
    let mut stream = admin
        .0
        .streaming_search_with(
            vec![
                Box::new(EntriesOnly::new()) as Box<dyn ldap3::adapters::Adapter<_, _>>,
                Box::new(PagedAdapter::new(50)),
            ],
            PEOPLE,
            Scope::Subtree,
            "(objectClass=inetOrgPerson)",
            vec!["uid"],
        )
        .expect("streaming search");
    let mut streamed = Vec::new();
    while let Some(entry) = stream.next().expect("next entry") {
        streamed.push(SearchEntry::construct(entry).dn);
    }
    assert_eq!(stream.result().rc, 0);
    assert_each_once(
        &streamed,
        &all_dns(&mut admin, PEOPLE, Scope::Subtree, "(objectClass=inetOrgPerson)"),
        "adapter",
    );

    // Size limits count over the whole paged search: anonymous may see 500 entries.
    let mut anonymous = bound(&server, "", "");
    let (mut total, mut cookie, mut last_rc) = (0, Vec::new(), 0);
    for _ in 0..20 {
        let (found, rc, next) = page(&mut anonymous, PEOPLE, "(objectClass=inetOrgPerson)", 150, &cookie);
        total += found.len();
        last_rc = rc;
        match next {
            Some(next) if !next.is_empty() && rc == 0 => cookie = next,
            _ => break,
        }
    }
    assert_eq!((total, last_rc), (500, 4), "anonymous: 500 entries in all, then sizeLimitExceeded");

    // A scope of one level, paged.
    let expected = all_dns(&mut admin, PEOPLE, Scope::OneLevel, "(objectClass=*)");
    let control: RawControl = PagedResults { size: 1000, cookie: vec![] }.into();
    let (entries, result) = admin
        .with_controls(control)
        .search(PEOPLE, Scope::OneLevel, "(objectClass=*)", vec!["1.1"])
        .unwrap()
        .success()
        .unwrap();
    let dns: Vec<String> = entries.into_iter().map(|e| SearchEntry::construct(e).dn).collect();
    assert_each_once(&dns, &expected, "one level");
    assert_eq!(response_cookie(&result), Some(vec![]));
}

#[test]
fn cookies_are_bound_to_their_search_and_identity_and_nothing_else() {
    let config = TEST_CONFIG.replacen("[log]", "[limits]\npaged_cookie_idle_max_s = 2\n[log]", 1);
    let server = Server::start_with_config(&config);
    load_users(&server, 120);
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let filter_a = "(objectClass=inetOrgPerson)";
    let filter_b = "(sn=s1)";
    let expected_a = all_dns(&mut admin, PEOPLE, Scope::Subtree, filter_a);
    let expected_b = all_dns(&mut admin, PEOPLE, Scope::Subtree, filter_b);

    // Two paged searches interleaved on one connection, the second also continued on
    // another connection of the same identity.
    let mut other = bound(&server, ADMIN_DN, ADMIN_PW);
    let (mut dns_a, mut dns_b) = (Vec::new(), Vec::new());
    let (mut cookie_a, mut cookie_b) = (Vec::new(), Vec::new());
    let (mut done_a, mut done_b, mut turn) = (false, false, 0);
    while !(done_a && done_b) {
        if !done_a {
            let (found, rc, next) = page(&mut admin, PEOPLE, filter_a, 9, &cookie_a);
            assert_eq!(rc, 0);
            dns_a.extend(found);
            cookie_a = next.unwrap();
            done_a = cookie_a.is_empty();
        }
        if !done_b {
            let client = if turn % 2 == 0 { &mut admin } else { &mut other };
            let (found, rc, next) = page(client, PEOPLE, filter_b, 2, &cookie_b);
            assert_eq!(rc, 0);
            dns_b.extend(found);
            cookie_b = next.unwrap();
            done_b = cookie_b.is_empty();
        }
        turn += 1;
    }
    assert_each_once(&dns_a, &expected_a, "interleaved search a");
    assert_each_once(&dns_b, &expected_b, "interleaved search b, on two connections");

    let (first, rc, cookie) = page(&mut admin, PEOPLE, filter_a, 10, &[]);
    assert_eq!((first.len(), rc), (10, 0));
    let cookie = cookie.unwrap();
    assert!(!cookie.is_empty());

    // Another identity, another search, an altered or made-up cookie: protocolError.
    let mut anonymous = bound(&server, "", "");
    let (found, rc, _) = page(&mut anonymous, PEOPLE, filter_a, 10, &cookie);
    assert_eq!((found.len(), rc), (0, 2), "another identity's cookie");
    let (found, rc, _) = page(&mut admin, PEOPLE, filter_b, 10, &cookie);
    assert_eq!((found.len(), rc), (0, 2), "another search's cookie");
    let mut forged = cookie.clone();
    let at = forged.len() / 2;
    forged[at] ^= 0x40;
    assert_eq!(page(&mut admin, PEOPLE, filter_a, 10, &forged).1, 2, "an altered cookie");
    assert_eq!(page(&mut admin, PEOPLE, filter_a, 10, b"bogus").1, 2, "a made-up cookie");

    // The cookie still works after all that; pageSize 0 ends the search.
    let (found, rc, _) = page(&mut admin, PEOPLE, filter_a, 10, &cookie);
    assert_eq!((found.len(), rc), (10, 0));
    assert!(found.iter().all(|dn| !first.contains(dn)), "the second page repeats the first");
    let (found, rc, next) = page(&mut admin, PEOPLE, filter_a, 0, &cookie);
    assert_eq!((found.len(), rc, next), (0, 0, Some(vec![])), "pageSize 0 ends the paged search");

    // Unused for longer than paged_cookie_idle_max_s: stale.
    std::thread::sleep(std::time::Duration::from_millis(3200));
    let (found, rc, _) = page(&mut admin, PEOPLE, filter_a, 10, &cookie);
    assert_eq!((found.len(), rc), (0, 53), "a stale cookie is unwillingToPerform");

    // A malformed control value is a protocolError; critical on a non-search, it is refused.
    let raw = RawControl { ctype: "1.2.840.113556.1.4.319".into(), crit: true, val: Some(vec![0x30, 0x00]) };
    let result =
        admin.with_controls(raw).search(PEOPLE, Scope::Base, "(objectClass=*)", vec!["1.1"]).unwrap();
    assert_eq!(result.1.rc, 2, "a malformed paged control");
    let control: RawControl = PagedResults { size: 10, cookie: vec![] }.into();
    let critical = RawControl { crit: true, ..control };
    let result = admin.with_controls(critical).compare(PEOPLE, "ou", "people").unwrap();
    assert_eq!(result.0.rc, 12, "a critical paged control on a compare");

    // Advertised in the root DSE.
    let (entries, _) = admin
        .search("", Scope::Base, "(objectClass=*)", vec!["supportedControl"])
        .unwrap()
        .success()
        .unwrap();
    let root = SearchEntry::construct(entries.into_iter().next().unwrap());
    assert!(root.attrs["supportedControl"].iter().any(|oid| oid == "1.2.840.113556.1.4.319"));
}

#[test]
fn writes_between_pages_never_repeat_an_entry_or_skip_an_unchanged_one() {
    let server = Server::start();
    load_users(&server, 400);
    let mut admin = bound(&server, ADMIN_DN, ADMIN_PW);
    let mut writer = bound(&server, ADMIN_DN, ADMIN_PW);
    let filter = "(objectClass=inetOrgPerson)";
    let before = all_dns(&mut admin, PEOPLE, Scope::Subtree, filter);
    // Entries touched while paging: uid=pN for N in `touched`.
    let mut touched: BTreeSet<usize> = BTreeSet::new();
    let (mut dns, mut cookie, mut pages) = (Vec::new(), Vec::new(), 0usize);
    loop {
        let (found, rc, next) = page(&mut admin, PEOPLE, filter, 25, &cookie);
        assert_eq!(rc, 0);
        dns.extend(found);
        let next = next.unwrap();
        if next.is_empty() {
            break;
        }
        cookie = next;
        // Between pages: an add, a delete, a rename (whose DN->ID record moves to another
        // shard) and a move to another container, spread over the whole id range.
        let n = pages * 13 % 400;
        writer
            .add(
                &format!("uid=new{pages},{PEOPLE}"),
                vec![
                    ("objectClass", ["inetOrgPerson"].into()),
                    ("uid", [format!("new{pages}").as_str()].into()),
                    ("cn", ["new"].into()),
                    ("sn", ["new"].into()),
                ],
            )
            .unwrap();
        let dn_of = |i: usize| {
            let parent = match i % 4 {
                0 => "ou=a,",
                1 => "ou=b,",
                _ => "",
            };
            format!("uid=p{i},{parent}{PEOPLE}")
        };
        for (i, action) in [(n, 0), ((n + 101) % 400, 1), ((n + 203) % 400, 2)] {
            if !touched.insert(i) {
                continue;
            }
            let rc = match action {
                0 => writer.delete(&dn_of(i)).unwrap().rc,
                1 => writer.modifydn(&dn_of(i), &format!("uid=r{i}"), true, None).unwrap().rc,
                _ => {
                    let to = if i % 4 == 0 {
                        "ou=b,ou=people,dc=example,dc=com"
                    } else {
                        "ou=a,ou=people,dc=example,dc=com"
                    };
                    writer.modifydn(&dn_of(i), &format!("uid=p{i}"), true, Some(to)).unwrap().rc
                }
            };
            assert_eq!(rc, 0, "write {action} on p{i}");
        }
        let _ = writer.modify(&dn_of(399), vec![Mod::Replace("cn", ["still here"].into())]);
        pages += 1;
    }
    assert!(pages > 10, "the search ran over several pages");
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for dn in &dns {
        *counts.entry(dn.to_lowercase()).or_insert(0) += 1;
    }
    let repeated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "entries sent twice: {repeated:?}");
    // Every entry that existed untouched for the whole search came back.
    let untouched: Vec<&String> = before
        .iter()
        .filter(|dn| {
            let uid = dn.split(',').next().unwrap_or("").trim_start_matches("uid=p");
            uid.parse::<usize>().map_or(true, |i| !touched.contains(&i))
        })
        .collect();
    let missing: Vec<_> = untouched.iter().filter(|dn| !counts.contains_key(&dn.to_lowercase())).collect();
    assert!(missing.is_empty(), "unchanged entries skipped: {missing:?}");
}
