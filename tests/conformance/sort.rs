//! Server-side sorting and VLV against slapd with its sssvlv overlay (`moduleload sssvlv`,
//! `overlay sssvlv`), both loaded with the same people, through the ldap3 crate's raw
//! controls: the same order where entries lack the key or hold several values, in both
//! directions and over two keys, the same VLV windows, and the same result codes for the
//! error cases. Where ferrodir departs on purpose (the VLV result values of slapd 2.5's
//! fallback defines; router/src/op/sort/mod.rs) the test says so.
//! Every case's data avoids ties that neither key breaks: slapd orders those by arrival,
//! ferrodir by entry id, and both are right.

use std::path::Path;

use ldap3::controls::RawControl;
use ldap3::{LdapConn, Scope, SearchEntry, SearchOptions, SearchResult};

use crate::servers::{self, Server, MANAGER_DN, MANAGER_PW, SUFFIX};

const SORT: &str = "1.2.840.113556.1.4.473";
const SORT_RESPONSE: &str = "1.2.840.113556.1.4.474";
const VLV: &str = "2.16.840.1.113730.3.4.9";
const VLV_RESPONSE: &str = "2.16.840.1.113730.3.4.10";
const PAGED: &str = "1.2.840.113556.1.4.319";

/// c and b hold two descriptions, d and f none; d has no uidNumber.
const PEOPLE: &str = "\
dn: ou=p,dc=example,dc=com
objectClass: organizationalUnit
ou: p

dn: cn=c,ou=p,dc=example,dc=com
objectClass: inetOrgPerson
objectClass: posixAccount
cn: c
sn: Charlie
uid: c
uidNumber: 5
gidNumber: 1
homeDirectory: /c
description: m
description: b

dn: cn=a,ou=p,dc=example,dc=com
objectClass: inetOrgPerson
objectClass: posixAccount
cn: a
sn: Alpha
uid: a
uidNumber: -2
gidNumber: 1
homeDirectory: /a
description: z

dn: cn=d,ou=p,dc=example,dc=com
objectClass: inetOrgPerson
cn: d
sn: Delta

dn: cn=b,ou=p,dc=example,dc=com
objectClass: inetOrgPerson
objectClass: posixAccount
cn: b
sn: Bravo
uid: b
uidNumber: 10
gidNumber: 1
homeDirectory: /b
description: C
description: a

dn: cn=e,ou=p,dc=example,dc=com
objectClass: inetOrgPerson
objectClass: posixAccount
cn: e
sn: Echo
uid: e
uidNumber: 7
gidNumber: 1
homeDirectory: /e
description: y

dn: cn=f,ou=p,dc=example,dc=com
objectClass: inetOrgPerson
objectClass: posixAccount
cn: f
sn: Foxtrot
uid: f
uidNumber: 1
gidNumber: 1
homeDirectory: /f
";

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    assert!(content.len() < 0x80);
    [vec![tag, content.len() as u8], content.to_vec()].concat()
}

fn int(n: u8) -> Vec<u8> {
    tlv(0x02, &[n])
}

/// A sort control from ldapsearch's syntax: `[-]attr[:rule]` keys joined by `/`.
fn sort(keys: &str) -> RawControl {
    let mut list = Vec::new();
    for key in keys.split('/') {
        let (reverse, key) = match key.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, key),
        };
        let (attr, rule) = match key.split_once(':') {
            Some((attr, rule)) => (attr, Some(rule)),
            None => (key, None),
        };
        let mut body = tlv(0x04, attr.as_bytes());
        if let Some(rule) = rule {
            body.extend(tlv(0x80, rule.as_bytes()));
        }
        if reverse {
            body.extend(tlv(0x81, &[0xff]));
        }
        list.extend(tlv(0x30, &body));
    }
    RawControl { ctype: SORT.into(), crit: true, val: Some(tlv(0x30, &list)) }
}

fn vlv_by_offset(before: u8, after: u8, offset: u8, count: u8) -> RawControl {
    let body = [int(before), int(after), tlv(0xa0, &[int(offset), int(count)].concat())].concat();
    RawControl { ctype: VLV.into(), crit: true, val: Some(tlv(0x30, &body)) }
}

fn vlv_by_value(before: u8, after: u8, value: &str) -> RawControl {
    let body = [int(before), int(after), tlv(0x81, value.as_bytes())].concat();
    RawControl { ctype: VLV.into(), crit: true, val: Some(tlv(0x30, &body)) }
}

fn paged(size: u8) -> RawControl {
    RawControl {
        ctype: PAGED.into(),
        crit: false,
        val: Some(tlv(0x30, &[int(size), tlv(0x04, b"")].concat())),
    }
}

/// What must agree: the result code, the entries in order (their cn), sortResult, and the
/// VLV response's targetPosition, contentCount and result.
#[derive(Debug, PartialEq)]
struct Answer {
    rc: u32,
    cns: Vec<String>,
    sort_result: Option<Vec<u8>>,
    vlv: Option<(u32, u32, u32)>,
}

fn ask(server: &Server, controls: Vec<RawControl>, size_limit: i32) -> Answer {
    let mut conn = LdapConn::new(&format!("ldap://{}", server.addr)).expect("connect");
    conn.simple_bind(MANAGER_DN, MANAGER_PW).expect("bind").success().expect("bind");
    let SearchResult(entries, result) = conn
        .with_controls(controls)
        .with_search_options(SearchOptions::new().sizelimit(size_limit))
        .search(&format!("ou=p,{SUFFIX}"), Scope::OneLevel, "(objectClass=person)", vec!["1.1"])
        .expect("search");
    let control = |oid: &str| result.ctrls.iter().find(|c| c.1.ctype == oid).and_then(|c| c.1.val.clone());
    let vlv = control(VLV_RESPONSE).map(|value| {
        // SEQUENCE { INTEGER, INTEGER, ENUMERATED, ... }, each a one- or two-byte number.
        let mut fields = Vec::new();
        let mut rest = &value[2..];
        while rest.len() >= 2 && fields.len() < 3 {
            let len = rest[1] as usize;
            fields.push(rest[2..2 + len].iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)));
            rest = &rest[2 + len..];
        }
        (fields[0], fields[1], fields[2])
    });
    Answer {
        rc: result.rc,
        cns: entries
            .into_iter()
            .map(|e| SearchEntry::construct(e).dn.split(',').next().unwrap_or("").to_ascii_lowercase())
            .collect(),
        sort_result: control(SORT_RESPONSE),
        vlv,
    }
}

fn start_both() -> (Server, Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let ldif = dir.path().join("people.ldif");
    let suffix =
        "dn: dc=example,dc=com\nobjectClass: dcObject\nobjectClass: organization\no: Example\ndc: example\n";
    std::fs::write(&ldif, format!("{suffix}\n{PEOPLE}")).expect("write ldif");
    let slapd = servers::start_slapd_with(
        Some(Path::new(&ldif)),
        &["moduleload sssvlv".into(), "overlay sssvlv".into()],
    );
    let ferrodir = servers::start_ferrodir(Some(Path::new(&ldif)));
    (slapd, ferrodir, dir)
}

#[test]
fn sorted_orders_match_slapds_where_keys_are_missing_or_multi_valued() {
    let (slapd, ferrodir, _dir) = start_both();
    let cases = [
        // Least value first, entries without the key last; reversed: least value still,
        // keyless first. sn breaks the tie between d and f.
        ("description:2.5.13.3/sn:2.5.13.3", vec!["b", "c", "e", "a", "d", "f"]),
        ("-description:2.5.13.3/sn:2.5.13.3", vec!["d", "f", "a", "e", "c", "b"]),
        ("-description:caseIgnoreOrderingMatch/-sn:2.5.13.3", vec!["f", "d", "a", "e", "c", "b"]),
        // The attribute's own ordering rule (integerOrderingMatch), numerically.
        ("uidNumber", vec!["a", "f", "c", "e", "b", "d"]),
        ("-uidNumber", vec!["d", "b", "e", "c", "f", "a"]),
        ("sn:2.5.13.3", vec!["a", "b", "c", "d", "e", "f"]),
    ];
    for (keys, expected) in cases {
        let reference = ask(&slapd, vec![sort(keys)], 0);
        let ours = ask(&ferrodir, vec![sort(keys)], 0);
        let expected: Vec<String> = expected.iter().map(|cn| format!("cn={cn}")).collect();
        assert_eq!(reference.cns, expected, "slapd, {keys} (the expectation is wrong?)");
        assert_eq!(ours, reference, "{keys}");
    }
}

#[test]
fn vlv_windows_and_error_codes_match_slapds() {
    let (slapd, ferrodir, _dir) = start_both();
    let by_sn = || sort("sn:2.5.13.3");
    let same = [
        ("unknown attribute: 16", vec![sort("noSuchAttribute")], 0),
        ("no ordering rule: 18", vec![sort("cn")], 0),
        ("an unknown rule: 18", vec![sort("cn:1.2.3.4")], 0),
        (
            "six keys: 53",
            vec![sort("sn:2.5.13.3/sn:2.5.13.3/sn:2.5.13.3/sn:2.5.13.3/sn:2.5.13.3/sn:2.5.13.3")],
            0,
        ),
        ("five keys", vec![sort("sn:2.5.13.3/sn:2.5.13.3/sn:2.5.13.3/sn:2.5.13.3/sn:2.5.13.3")], 0),
        ("sizeLimit: the first sorted entries, 4", vec![sort("-sn:2.5.13.3")], 2),
        ("VLV with paged results: 53", vec![by_sn(), vlv_by_offset(0, 1, 2, 0), paged(2)], 0),
        ("VLV byOffset", vec![by_sn(), vlv_by_offset(1, 1, 3, 0)], 0),
        ("VLV the last", vec![by_sn(), vlv_by_offset(1, 1, 6, 6)], 0),
        ("VLV a scaled offset", vec![by_sn(), vlv_by_offset(0, 1, 5, 10)], 0),
        ("VLV greaterThanOrEqual", vec![by_sn(), vlv_by_value(1, 1, "Cz")], 0),
        ("VLV greaterThanOrEqual past the end", vec![by_sn(), vlv_by_value(2, 1, "Zulu")], 0),
        ("VLV greaterThanOrEqual reversed", vec![sort("-sn:2.5.13.3"), vlv_by_value(0, 2, "Cz")], 0),
    ];
    for (case, controls, size_limit) in same {
        let reference = ask(&slapd, controls.clone(), size_limit);
        let ours = ask(&ferrodir, controls, size_limit);
        assert_eq!(ours, reference, "{case}");
    }
    // Errors where slapd 2.5 puts its fallback values (76, 77) in the VLV response and we
    // the draft's (60, 61): the same result code and window otherwise.
    let departures = [
        ("VLV without sort", vec![vlv_by_offset(0, 1, 2, 0)], (76, 60)),
        ("VLV offset past the list", vec![by_sn(), vlv_by_offset(0, 0, 9, 0)], (77, 61)),
    ];
    for (case, controls, (theirs, draft)) in departures {
        let reference = ask(&slapd, controls.clone(), 0);
        let ours = ask(&ferrodir, controls, 0);
        assert_eq!(reference.rc, 76, "{case}: slapd");
        assert_eq!(reference.vlv.map(|v| v.2), Some(theirs), "{case}: slapd");
        assert_eq!((ours.rc, ours.cns.len()), (reference.rc, reference.cns.len()), "{case}");
        assert_eq!(ours.vlv.map(|v| v.2), Some(draft), "{case}");
    }
}
