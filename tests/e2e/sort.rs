//! Server-side sorting (RFC 2891) and Virtual List View (draft-ietf-ldapext-ldapv3-vlv-09)
//! against the real binary with four shards, through the ldap3 crate's raw controls: the
//! order across shards, reverse and two keys, sorting combined with paged results over
//! several pages (the sorted list kept on the server), sort_entries_max, the sessions per
//! connection, idle expiry, VLV byOffset and greaterThanOrEqual with contentCount, and the
//! error results. slapd's order and codes on the same data: tests/conformance/sort.rs.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use ldap3::controls::RawControl;
use ldap3::{Scope, SearchEntry, SearchResult};

use crate::harness::{bound, tool, wait_until, Client, Server, ADMIN_DN, ADMIN_PW, TEST_CONFIG};

const SORT: &str = "1.2.840.113556.1.4.473";
const SORT_RESPONSE: &str = "1.2.840.113556.1.4.474";
const VLV: &str = "2.16.840.1.113730.3.4.9";
const VLV_RESPONSE: &str = "2.16.840.1.113730.3.4.10";
const PAGED: &str = "1.2.840.113556.1.4.319";
const OU: &str = "ou=sorted,dc=example,dc=com";
/// caseIgnoreOrderingMatch: sn and cn have no ORDERING in the standard schema.
const CASE_IGNORE_ORDERING: &str = "2.5.13.3";
const PEOPLE: usize = 40;

// ---- BER for the control values ----

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    assert!(content.len() < 0x10000);
    let mut out = vec![tag];
    match content.len() {
        n if n < 0x80 => out.push(n as u8),
        n if n < 0x100 => out.extend([0x81, n as u8]),
        n => out.extend([0x82, (n >> 8) as u8, n as u8]),
    }
    out.extend_from_slice(content);
    out
}

fn int(n: u32) -> Vec<u8> {
    let bytes = n.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count().min(3);
    let mut content = bytes[skip..].to_vec();
    if content[0] & 0x80 != 0 {
        content.insert(0, 0);
    }
    tlv(0x02, &content)
}

/// One key: `attr`, with `rule` when given, reversed when `reverse`.
fn key(attr: &str, rule: Option<&str>, reverse: bool) -> Vec<u8> {
    let mut body = tlv(0x04, attr.as_bytes());
    if let Some(rule) = rule {
        body.extend(tlv(0x80, rule.as_bytes()));
    }
    if reverse {
        body.extend(tlv(0x81, &[0xff]));
    }
    tlv(0x30, &body)
}

fn sort_control(keys: &[Vec<u8>], crit: bool) -> RawControl {
    RawControl { ctype: SORT.into(), crit, val: Some(tlv(0x30, &keys.concat())) }
}

fn sn_key(reverse: bool) -> Vec<u8> {
    key("sn", Some(CASE_IGNORE_ORDERING), reverse)
}

fn paged_control(size: u32, cookie: &[u8]) -> RawControl {
    RawControl {
        ctype: PAGED.into(),
        crit: false,
        val: Some(tlv(0x30, &[int(size), tlv(0x04, cookie)].concat())),
    }
}

fn vlv_by_offset(before: u32, after: u32, offset: u32, count: u32, context: Option<&[u8]>) -> RawControl {
    let mut body = [int(before), int(after), tlv(0xa0, &[int(offset), int(count)].concat())].concat();
    if let Some(context) = context {
        body.extend(tlv(0x04, context));
    }
    RawControl { ctype: VLV.into(), crit: true, val: Some(tlv(0x30, &body)) }
}

fn vlv_by_value(before: u32, after: u32, value: &str) -> RawControl {
    let body = [int(before), int(after), tlv(0x81, value.as_bytes())].concat();
    RawControl { ctype: VLV.into(), crit: true, val: Some(tlv(0x30, &body)) }
}

/// The TLVs inside a SEQUENCE: (tag, content).
fn elements(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= 2 {
        let tag = bytes[0];
        let (len, head) = match bytes[1] {
            n if n < 0x80 => (n as usize, 2),
            0x81 => (bytes[2] as usize, 3),
            0x82 => (((bytes[2] as usize) << 8) | bytes[3] as usize, 4),
            other => panic!("length form {other:#x}"),
        };
        out.push((tag, bytes[head..head + len].to_vec()));
        bytes = &bytes[head + len..];
    }
    out
}

fn sequence(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let outer = elements(bytes);
    assert_eq!(outer.len(), 1, "one SEQUENCE: {bytes:02x?}");
    assert_eq!(outer[0].0, 0x30);
    elements(&outer[0].1)
}

fn number(content: &[u8]) -> u32 {
    content.iter().fold(0, |n, b| (n << 8) | u32::from(*b))
}

// ---- searching ----

struct Outcome {
    dns: Vec<String>,
    rc: u32,
    controls: Vec<RawControl>,
}

impl Outcome {
    fn control(&self, oid: &str) -> Option<&[u8]> {
        self.controls.iter().find(|c| c.ctype == oid).and_then(|c| c.val.as_deref())
    }

    fn sort_result(&self) -> Option<u32> {
        let value = self.control(SORT_RESPONSE)?;
        let fields = sequence(value);
        assert_eq!(fields[0].0, 0x0a);
        Some(number(&fields[0].1))
    }

    /// The paged response: (size, cookie).
    fn paged(&self) -> (u32, Vec<u8>) {
        let fields = sequence(self.control(PAGED).expect("paged response control"));
        (number(&fields[0].1), fields[1].1.clone())
    }

    /// The VLV response: (targetPosition, contentCount, result, contextID).
    fn vlv(&self) -> (u32, u32, u32, Vec<u8>) {
        let fields = sequence(self.control(VLV_RESPONSE).expect("VLV response control"));
        let context = fields.get(3).map(|f| f.1.clone()).unwrap_or_default();
        (number(&fields[0].1), number(&fields[1].1), number(&fields[2].1), context)
    }

    fn names(&self) -> Vec<String> {
        self.dns
            .iter()
            .map(|dn| dn.split(',').next().unwrap().trim_start_matches("cn=").to_string())
            .collect()
    }
}

fn search(client: &mut Client, filter: &str, controls: Vec<RawControl>) -> Outcome {
    let SearchResult(entries, result) =
        client.with_controls(controls).search(OU, Scope::OneLevel, filter, vec!["1.1"]).expect("search");
    Outcome {
        dns: entries.into_iter().map(|e| SearchEntry::construct(e).dn).collect(),
        rc: result.rc,
        controls: result.ctrls.into_iter().map(|c| c.1).collect(),
    }
}

/// The family names, in an order unrelated to the entries' ids: sn(i) = "name" + (i * 7
/// mod 40), zero-padded; every fifth person has a second, larger sn value.
fn sn_of(i: usize) -> String {
    format!("name{:02}", (i * 7) % PEOPLE)
}

/// Loads `ou=sorted` with PEOPLE people (cn=p00..p39), spread over the shards.
fn load(server: &Server) -> Client {
    let mut admin = bound(server, ADMIN_DN, ADMIN_PW);
    admin
        .add(OU, vec![("objectClass", ["organizationalUnit"].into()), ("ou", ["sorted"].into())])
        .expect("add ou")
        .success()
        .expect("add ou");
    for i in 0..PEOPLE {
        let dn = format!("cn=p{i:02},{OU}");
        let mut sn = vec![sn_of(i)];
        if i % 5 == 0 {
            sn.push("zzz".to_string());
        }
        let given = format!("g{:02}", PEOPLE - i);
        let uid_number = format!("{}", (i as i64 - 20) * 3);
        let set = |values: &[&str]| values.iter().map(|v| v.to_string()).collect::<HashSet<String>>();
        let attrs: Vec<(String, HashSet<String>)> = vec![
            ("objectClass".into(), set(&["inetOrgPerson", "posixAccount"])),
            ("cn".into(), set(&[&format!("p{i:02}")])),
            ("sn".into(), sn.into_iter().collect()),
            ("givenName".into(), set(&[&given])),
            ("uid".into(), set(&[&format!("u{i}")])),
            ("uidNumber".into(), set(&[&uid_number])),
            ("gidNumber".into(), set(&["100"])),
            ("homeDirectory".into(), set(&["/home/x"])),
        ];
        admin.add(&dn, attrs).expect("add").success().expect("add person");
    }
    admin
}

fn expected_by_sn(reverse: bool) -> Vec<String> {
    // Each person's least sn is sn_of(i) ("zzz" is larger), all distinct.
    let mut people: Vec<(String, String)> = (0..PEOPLE).map(|i| (sn_of(i), format!("p{i:02}"))).collect();
    people.sort();
    if reverse {
        people.reverse();
    }
    people.into_iter().map(|(_, cn)| cn).collect()
}

fn config(extra: &str) -> String {
    TEST_CONFIG.replacen("[log]", &format!("[limits]\n{extra}\n[log]"), 1)
}

#[test]
fn sorts_across_shards_in_both_directions_and_by_two_keys() {
    let server = Server::start();
    let mut admin = load(&server);
    let forward = search(&mut admin, "(objectClass=person)", vec![sort_control(&[sn_key(false)], true)]);
    assert_eq!(forward.rc, 0);
    assert_eq!(forward.sort_result(), Some(0));
    assert_eq!(forward.names(), expected_by_sn(false));
    let reverse = search(&mut admin, "(objectClass=person)", vec![sort_control(&[sn_key(true)], false)]);
    assert_eq!(reverse.names(), expected_by_sn(true));
    // Integers by their own ordering rule, numerically (-60 .. 57), in reverse.
    let numbers = search(&mut admin, "(uid=*)", vec![sort_control(&[key("uidNumber", None, true)], true)]);
    let expected: Vec<String> = (0..PEOPLE).rev().map(|i| format!("p{i:02}")).collect();
    assert_eq!(numbers.names(), expected);
    // Two keys: gidNumber ties everywhere, then givenName reversed (g40 .. g01 reversed
    // is p00 .. p39 in cn order's reverse of reverse).
    let two = search(
        &mut admin,
        "(objectClass=person)",
        vec![sort_control(
            &[key("gidNumber", None, false), key("givenName", Some(CASE_IGNORE_ORDERING), true)],
            true,
        )],
    );
    let expected: Vec<String> = (0..PEOPLE).map(|i| format!("p{i:02}")).collect();
    assert_eq!(two.names(), expected, "givenName g40 (p00) is the largest, first in reverse");
    // The root DSE advertises both controls now that they work.
    let (rc, out, _) = tool(
        "ldapsearch",
        &["-x", "-H", &server.url(), "-b", "", "-s", "base", "-LLL", "supportedControl"],
        None,
    );
    assert_eq!(rc, 0);
    assert!(out.contains(SORT) && out.contains(VLV), "{out}");
}

#[test]
fn a_sorted_paged_search_walks_the_kept_list_page_by_page() {
    let server = Server::start();
    let mut admin = load(&server);
    let mut cookie = Vec::new();
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut old_cookie = Vec::new();
    loop {
        let page = search(
            &mut admin,
            "(objectClass=person)",
            vec![sort_control(&[sn_key(false)], true), paged_control(7, &cookie)],
        );
        assert_eq!(page.rc, 0, "page {pages}");
        assert_eq!(page.sort_result(), Some(0));
        pages += 1;
        assert!(page.dns.len() <= 7);
        seen.extend(page.names());
        let (left, next) = page.paged();
        assert_eq!(left as usize, PEOPLE - seen.len(), "the size is what is left");
        if next.is_empty() {
            break;
        }
        old_cookie = cookie;
        cookie = next;
        assert!(pages < 10);
    }
    assert_eq!(pages, 6);
    assert_eq!(seen, expected_by_sn(false));
    // OpenLDAP's ldapsearch, with the paged control critical, walks the same list.
    let (rc, out, err) = tool(
        "ldapsearch",
        &[
            "-x",
            "-H",
            &server.url(),
            "-D",
            ADMIN_DN,
            "-w",
            ADMIN_PW,
            "-b",
            OU,
            "-s",
            "one",
            "-LLL",
            "-E",
            "sss=sn:2.5.13.3",
            "-E",
            "!pr=7/noprompt",
            "(objectClass=person)",
            "1.1",
        ],
        None,
    );
    assert_eq!(rc, 0, "{err}");
    let dns: Vec<String> = out
        .lines()
        .filter_map(|line| line.strip_prefix("dn: cn="))
        .map(|rest| rest.split(',').next().unwrap_or("").to_string())
        .collect();
    assert_eq!(dns, expected_by_sn(false));
    assert_eq!(out.matches("# sortResult: (0) Success").count(), 6, "{out}");
    // A cookie already used, or made up, names no session: protocolError.
    let stale = search(
        &mut admin,
        "(objectClass=person)",
        vec![sort_control(&[sn_key(false)], true), paged_control(7, &old_cookie)],
    );
    assert_eq!(stale.rc, 2);
    // pageSize 0 with a cookie ends the search and frees its session.
    let first = search(
        &mut admin,
        "(objectClass=person)",
        vec![sort_control(&[sn_key(false)], true), paged_control(10, b"")],
    );
    let (_, cookie) = first.paged();
    let end = search(
        &mut admin,
        "(objectClass=person)",
        vec![sort_control(&[sn_key(false)], true), paged_control(0, &cookie)],
    );
    assert_eq!((end.rc, end.dns.len()), (0, 0));
    let after = search(
        &mut admin,
        "(objectClass=person)",
        vec![sort_control(&[sn_key(false)], true), paged_control(10, &cookie)],
    );
    assert_eq!(after.rc, 2);
}

#[test]
fn sort_entries_max_sessions_and_idle_expiry() {
    let server = Server::start_with_config(&config(
        "sort_entries_max = 30\nsort_sessions_per_connection_max = 2\nsort_session_idle_s = 1",
    ));
    let mut admin = load(&server);
    // 40 matches, 30 allowed: adminLimitExceeded, in sortResult too, no entries.
    let over = search(&mut admin, "(objectClass=person)", vec![sort_control(&[sn_key(false)], false)]);
    assert_eq!((over.rc, over.sort_result(), over.dns.len()), (11, Some(11), 0));
    let sorted = |client: &mut Client, cookie: &[u8]| {
        search(client, "(uid=u1*)", vec![sort_control(&[sn_key(false)], true), paged_control(2, cookie)])
    };
    // Two kept sessions fill the connection's slots; a third is busy.
    let one = sorted(&mut admin, b"");
    let two = sorted(&mut admin, b"");
    assert_eq!((one.rc, two.rc), (0, 0));
    assert_eq!(sorted(&mut admin, b"").rc, 51);
    // Another connection has slots of its own.
    let mut other = bound(&server, ADMIN_DN, ADMIN_PW);
    assert_eq!(sorted(&mut other, b"").rc, 0);
    // Ending one frees its slot.
    let (_, cookie) = one.paged();
    let end = search(
        &mut admin,
        "(uid=u1*)",
        vec![sort_control(&[sn_key(false)], true), paged_control(0, &cookie)],
    );
    assert_eq!(end.rc, 0);
    let three = sorted(&mut admin, b"");
    assert_eq!(three.rc, 0);
    // Idle past sort_session_idle_s: the sessions are gone, their cookies with them. Seen
    // as their slots coming free: a sorted search that ends in one page (so keeps no
    // session) gets busy while both slots are held, and goes through once one expired.
    // Then a kept session takes that slot, and the probe waits for the other one.
    let probe = |client: &mut Client| {
        search(client, "(uid=u1*)", vec![sort_control(&[sn_key(false)], true), paged_control(100, b"")]).rc
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    assert!(wait_until(deadline, || probe(&mut admin) == 0), "no sorted session expired");
    let four = sorted(&mut admin, b"");
    assert_eq!(four.rc, 0);
    assert!(wait_until(deadline, || probe(&mut admin) == 0), "the second sorted session did not expire");
    let (_, cookie) = two.paged();
    assert_eq!(sorted(&mut admin, &cookie).rc, 2);
    let (_, cookie) = three.paged();
    assert_eq!(sorted(&mut admin, &cookie).rc, 2);
    assert_eq!(sorted(&mut admin, b"").rc, 0);
}

#[test]
fn vlv_windows_by_offset_and_by_value() {
    let server = Server::start();
    let mut admin = load(&server);
    let all = expected_by_sn(false);
    let by_sn = || sort_control(&[sn_key(false)], true);
    // Offset 10 of our 40, two before and three after.
    let window = search(&mut admin, "(objectClass=person)", vec![by_sn(), vlv_by_offset(2, 3, 10, 0, None)]);
    assert_eq!(window.rc, 0);
    assert_eq!(window.names(), all[7..13]);
    let (target, count, result, context) = window.vlv();
    assert_eq!((target, count, result), (10, 40, 0));
    assert!(!context.is_empty());
    // The client's contentCount of 20 scales offset 5 to 10; the context continues the list.
    let scaled =
        search(&mut admin, "(objectClass=person)", vec![by_sn(), vlv_by_offset(0, 0, 5, 20, Some(&context))]);
    assert_eq!(scaled.names(), all[9..10]);
    assert_eq!(scaled.vlv().0, 10);
    assert_eq!(scaled.vlv().3, context, "a continued list keeps its contextID");
    // The last entry: offset == contentCount.
    let last = search(&mut admin, "(objectClass=person)", vec![by_sn(), vlv_by_offset(1, 5, 40, 40, None)]);
    assert_eq!(last.names(), all[38..40]);
    // greaterThanOrEqual: the first sn not below "name25" (case ignored) is the 26th.
    let value = search(&mut admin, "(objectClass=person)", vec![by_sn(), vlv_by_value(1, 1, "NAME25")]);
    assert_eq!(value.names(), all[24..27]);
    assert_eq!(value.vlv().0, 26);
    // Past the list: offsetRangeError in the VLV response, virtualListViewError (76).
    let range = search(&mut admin, "(objectClass=person)", vec![by_sn(), vlv_by_offset(0, 0, 41, 0, None)]);
    assert_eq!((range.rc, range.vlv().2, range.dns.len()), (76, 61, 0));
    // VLV without sort: 76 with sortControlMissing (60).
    let missing = search(&mut admin, "(objectClass=person)", vec![vlv_by_offset(0, 0, 1, 0, None)]);
    assert_eq!((missing.rc, missing.vlv().2), (76, 60));
    // VLV with paged results: unwillingToPerform.
    let both = search(
        &mut admin,
        "(objectClass=person)",
        vec![by_sn(), vlv_by_offset(0, 0, 1, 0, None), paged_control(5, b"")],
    );
    assert_eq!(both.rc, 53);
}

#[test]
fn bad_sort_requests_get_slapds_codes() {
    let server = Server::start();
    let mut admin = load(&server);
    let code = |client: &mut Client, keys: &[Vec<u8>], crit: bool| {
        let outcome = search(client, "(objectClass=person)", vec![sort_control(keys, crit)]);
        (outcome.rc, outcome.sort_result())
    };
    for crit in [true, false] {
        assert_eq!(code(&mut admin, &[key("noSuchAttr", None, false)], crit), (16, None));
        // cn has no ORDERING; a named rule that isn't an ordering rule is as bad.
        assert_eq!(code(&mut admin, &[key("cn", None, false)], crit), (18, None));
        assert_eq!(code(&mut admin, &[key("cn", Some("2.5.13.2"), false)], crit), (18, None));
        assert_eq!(code(&mut admin, &[key("cn", Some("1.2.3.4"), false)], crit), (18, None));
    }
    assert_eq!(code(&mut admin, &vec![sn_key(false); 6], true), (53, None));
    assert_eq!(code(&mut admin, &vec![sn_key(false); 5], true), (0, Some(0)));
    // An error of the search itself carries sortResult with its code.
    let missing = admin
        .with_controls(vec![sort_control(&[sn_key(false)], true)])
        .search("ou=nowhere,dc=example,dc=com", Scope::Subtree, "(objectClass=*)", vec!["1.1"])
        .expect("search");
    assert_eq!(missing.1.rc, 32);
    let sort = missing.1.ctrls.iter().find(|c| c.1.ctype == SORT_RESPONSE).expect("sortResult");
    assert_eq!(sort.1.val.as_deref(), Some(&[0x30, 0x03, 0x0a, 0x01, 32][..]));
    // A sizeLimit takes the first entries of the sorted list: 4, no sortResult (as slapd).
    let SearchResult(entries, result) = admin
        .with_controls(vec![sort_control(&[sn_key(false)], true)])
        .with_search_options(ldap3::SearchOptions::new().sizelimit(3))
        .search(OU, Scope::OneLevel, "(objectClass=person)", vec!["1.1"])
        .expect("search");
    assert_eq!(result.rc, 4);
    let names: Vec<String> = entries
        .into_iter()
        .map(|e| SearchEntry::construct(e).dn.split(',').next().unwrap()[3..].to_string())
        .collect();
    assert_eq!(names, expected_by_sn(false)[..3]);
}

#[test]
fn what_the_requester_may_not_read_does_not_order() {
    // Under the default rules anonymous may not read userPassword: sorting by it sees no
    // values, so both directions give the same (id) order; the rootDN sees them.
    let server = Server::start();
    let mut admin = load(&server);
    for i in 0..PEOPLE {
        let dn = format!("cn=p{i:02},{OU}");
        let password = format!("{:02}", (i * 13) % PEOPLE);
        admin
            .modify(&dn, vec![ldap3::Mod::Replace("userPassword", [password.as_str()].into())])
            .expect("modify")
            .success()
            .expect("set userPassword");
    }
    let by_password = |reverse| sort_control(&[key("userPassword", Some("2.5.13.18"), reverse)], true);
    // The stored values are salted hashes, all different: the rootDN's two orders are
    // each other's reverse.
    let root_forward = search(&mut admin, "(objectClass=person)", vec![by_password(false)]);
    let mut root_reverse = search(&mut admin, "(objectClass=person)", vec![by_password(true)]).names();
    root_reverse.reverse();
    assert_eq!(root_forward.names(), root_reverse);
    let mut anonymous = bound(&server, "", "");
    let forward = search(&mut anonymous, "(objectClass=person)", vec![by_password(false)]);
    let reverse = search(&mut anonymous, "(objectClass=person)", vec![by_password(true)]);
    assert_eq!(forward.dns.len(), PEOPLE);
    assert_eq!(forward.names(), reverse.names(), "hidden values must not order the entries");
    assert_ne!(forward.names(), root_forward.names());
}
