//! Hostile and unusual input that slapd answers in a particular way (issue #9, item 4), with
//! raw BER so that the test controls every byte:
//! - an OCTET STRING in the constructed form (RFC 4511 §5.1 allows only the primitive one)
//!   is a decoding error: Notice of Disconnection with protocolError, then the close;
//! - an unknown ENUMERATED value (modify operation, search scope, derefAliases) in otherwise
//!   well-formed BER gets the operation's own response with protocolError, and the
//!   connection goes on;
//! - a BOOLEAN TRUE sent as `01` rather than `FF` (RFC 4511 §5.1) is TRUE, as in slapd;
//! - an unsupported extended operation, and Who am I? with a requestValue, get protocolError
//!   and the connection goes on;
//! - scope 3 (OpenLDAP's `children`, subordinate subtree) returns every entry below the
//!   base, not the base itself, on the indexed and the unindexed paths;
//! - a substring filter with misordered or empty parts is Undefined (matches nothing, nor
//!   does its negation), as in slapd.

use std::collections::BTreeSet;

use crate::harness::{Server, BASE};
use crate::raw::{
    assert_refused, assert_usable, connect, int, message, octets, parse_result, present, read_message,
    read_search, search, send, tlv, Outcome, EXTENDED_RESPONSE, SEARCH_RESULT_DONE, WHO_AM_I,
};

const PEOPLE: &str = "ou=people,dc=example,dc=com";
const GROUPS: &str = "ou=groups,dc=example,dc=com";
const ALICE: &str = "uid=alice,ou=people,dc=example,dc=com";
const BOB: &str = "uid=bob,ou=people,dc=example,dc=com";
const STAFF: &str = "cn=staff,ou=groups,dc=example,dc=com";
const MODIFY_RESPONSE: u8 = 0x67;

/// A constructed OCTET STRING holding `value` as two primitive segments, under `tag`.
fn constructed(tag: u8, value: &[u8]) -> Vec<u8> {
    let (first, second) = value.split_at(value.len() / 2);
    tlv(tag, &[octets(first), octets(second)].concat())
}

/// A SearchRequest with each field given as its encoding.
fn search_raw(id: u32, base: &[u8], scope: u32, deref: u32, filter: &[u8]) -> Vec<u8> {
    let body = [
        base.to_vec(),
        int(0x0a, scope),
        int(0x0a, deref),
        int(0x02, 0),
        int(0x02, 0),
        tlv(0x01, &[0x00]),
        filter.to_vec(),
        tlv(0x30, &[]),
    ]
    .concat();
    message(id, &tlv(0x63, &body))
}

/// A ModifyRequest of `dn` with one change: `operation` on `attr` with `value`.
fn modify(id: u32, dn: &str, operation: u32, attr: &str, value: &str) -> Vec<u8> {
    let modification = tlv(0x30, &[octets(attr.as_bytes()), tlv(0x31, &octets(value.as_bytes()))].concat());
    let change = tlv(0x30, &[int(0x0a, operation), modification].concat());
    message(id, &tlv(0x66, &[octets(dn.as_bytes()), tlv(0x30, &change)].concat()))
}

fn extended(id: u32, name: &[u8], value: Option<&[u8]>) -> Vec<u8> {
    let mut body = tlv(0x80, name);
    if let Some(value) = value {
        body.extend(tlv(0x81, value));
    }
    message(id, &tlv(0x77, &body))
}

/// Reads the next response and checks its messageID and protocolOp.
fn expect_response(stream: &mut std::net::TcpStream, id: u32, op: u8) -> Outcome {
    let reply = read_message(stream);
    assert_eq!((reply.id, reply.op), (id, op), "{reply:02x?}");
    parse_result(&reply.body)
}

fn set(dns: &[&str]) -> BTreeSet<String> {
    dns.iter().map(|dn| dn.to_string()).collect()
}

#[test]
fn constructed_octet_strings_get_a_notice_of_disconnection() {
    let server = Server::start();
    let filter = present("objectClass");
    let base = constructed(0x24, BASE.as_bytes());
    assert_refused(&server, &search_raw(2, &base, 2, 0, &filter), "constructed baseObject");
    let filter_value = tlv(0xa3, &[octets(b"uid"), constructed(0x24, b"alice")].concat());
    let pdu = search_raw(2, &octets(BASE.as_bytes()), 2, 0, &filter_value);
    assert_refused(&server, &pdu, "constructed assertion value");
    let pdu = message(2, &constructed(0x6a, ALICE.as_bytes()));
    assert_refused(&server, &pdu, "constructed DelRequest");
    let pdu = search_raw(2, &octets(BASE.as_bytes()), 2, 0, &constructed(0xa7, b"objectClass"));
    assert_refused(&server, &pdu, "constructed present filter");
}

#[test]
fn unknown_modify_operation_gets_protocol_error_and_the_connection_stays() {
    let server = Server::start();
    let mut stream = connect(&server);
    send(&mut stream, &modify(2, ALICE, 7, "description", "x"));
    let outcome = expect_response(&mut stream, 2, MODIFY_RESPONSE);
    assert_eq!((outcome.code, outcome.diagnostic.as_str()), (2, "unrecognized modify operation"));
    assert_usable(&mut stream, 3);
}

#[test]
fn unknown_scope_or_deref_gets_protocol_error_and_the_connection_stays() {
    let server = Server::start();
    let mut stream = connect(&server);
    let filter = present("objectClass");
    let base = octets(BASE.as_bytes());
    let cases = [
        (2, 4, 0, "invalid scope"),
        (3, 200, 0, "invalid scope"),
        (4, 0, 4, "invalid deref"),
        (5, 2, 77, "invalid deref"),
    ];
    for (id, scope, deref, diagnostic) in cases {
        send(&mut stream, &search_raw(id, &base, scope, deref, &filter));
        let outcome = expect_response(&mut stream, id, SEARCH_RESULT_DONE);
        assert_eq!(
            (outcome.code, outcome.diagnostic.as_str()),
            (2, diagnostic),
            "scope {scope} deref {deref}"
        );
    }
    assert_usable(&mut stream, 6);
}

#[test]
fn unsupported_extended_operations_get_protocol_error_and_the_connection_stays() {
    let server = Server::start();
    let mut stream = connect(&server);
    send(&mut stream, &extended(2, b"1.2.3.4.5", None));
    let outcome = expect_response(&mut stream, 2, EXTENDED_RESPONSE);
    assert_eq!((outcome.code, outcome.diagnostic.as_str()), (2, "unsupported extended operation"));
    // RFC 4532 §2: Who am I? has no requestValue.
    send(&mut stream, &extended(3, WHO_AM_I, Some(b"dn:")));
    let outcome = expect_response(&mut stream, 3, EXTENDED_RESPONSE);
    assert_eq!((outcome.code, outcome.diagnostic.as_str()), (2, "no request data expected"));
    send(&mut stream, &extended(4, WHO_AM_I, None));
    assert_eq!(expect_response(&mut stream, 4, EXTENDED_RESPONSE).code, 0);
    assert_usable(&mut stream, 5);
}

/// Reads a search's entries (DNs, lowercased) and asserts that it succeeded.
fn found(stream: &mut std::net::TcpStream, id: u32) -> BTreeSet<String> {
    let (dns, outcome) = read_search(stream, id);
    assert_eq!(outcome.code, 0, "{outcome:?}");
    dns.into_iter().map(|dn| dn.to_ascii_lowercase()).collect()
}

#[test]
fn children_scope_returns_what_is_below_the_base() {
    let server = Server::start();
    let mut stream = connect(&server);
    let everything = present("objectClass");
    send(&mut stream, &search(2, BASE, 3, &everything, &["1.1"]));
    assert_eq!(found(&mut stream, 2), set(&[PEOPLE, GROUPS, ALICE, BOB, STAFF]));
    send(&mut stream, &search(3, PEOPLE, 3, &everything, &["1.1"]));
    assert_eq!(found(&mut stream, 3), set(&[ALICE, BOB]));
    // A leaf has no children; the indexed path (uid is indexed) leaves the base out too.
    send(&mut stream, &search(4, ALICE, 3, &everything, &["1.1"]));
    assert_eq!(found(&mut stream, 4), set(&[]));
    let alice = tlv(0xa3, &[octets(b"uid"), octets(b"alice")].concat());
    send(&mut stream, &search(5, ALICE, 3, &alice, &["1.1"]));
    assert_eq!(found(&mut stream, 5), set(&[]));
    send(&mut stream, &search(6, PEOPLE, 3, &alice, &["1.1"]));
    assert_eq!(found(&mut stream, 6), set(&[ALICE]));
    // A missing base is noSuchObject, as for the other scopes.
    send(&mut stream, &search(7, "ou=missing,dc=example,dc=com", 3, &everything, &["1.1"]));
    assert_eq!(read_search(&mut stream, 7).1.code, 32);
}

/// RFC 4511 §4.5.1.7.2: a final before an initial, or an empty any, is not a substring
/// filter a string can write; slapd evaluates such an item as Undefined, so neither it nor
/// its negation matches anything, and the search succeeds.
#[test]
fn malformed_substring_filters_match_nothing() {
    let server = Server::start();
    let mut stream = connect(&server);
    let substrings = |parts: &[Vec<u8>]| tlv(0xa4, &[octets(b"cn"), tlv(0x30, &parts.concat())].concat());
    let misordered = substrings(&[tlv(0x82, b"e"), tlv(0x80, b"A")]);
    let empty_any = substrings(&[tlv(0x80, b"A"), tlv(0x81, b"")]);
    let mut id = 2;
    for filter in [misordered, empty_any] {
        for filter in [filter.clone(), tlv(0xa2, &filter)] {
            send(&mut stream, &search(id, BASE, 2, &filter, &["1.1"]));
            assert_eq!(found(&mut stream, id), set(&[]), "{filter:02x?}");
            id += 1;
        }
    }
    // The well-formed filter matches.
    let fine = substrings(&[tlv(0x80, b"A"), tlv(0x82, b"l")]);
    send(&mut stream, &search(id, BASE, 2, &fine, &["1.1"]));
    assert!(found(&mut stream, id).contains(ALICE));
}

/// RFC 4511 §5.1 wants `FF` for TRUE; slapd takes any non-zero octet, and so do we.
#[test]
fn boolean_true_as_01_is_accepted() {
    let server = Server::start();
    let mut stream = connect(&server);
    let body = [
        octets(ALICE.as_bytes()),
        int(0x0a, 0),
        int(0x0a, 0),
        int(0x02, 0),
        int(0x02, 0),
        tlv(0x01, &[0x01]), // typesOnly TRUE, BER style
        present("objectClass"),
        tlv(0x30, &octets(b"cn")),
    ]
    .concat();
    send(&mut stream, &message(2, &tlv(0x63, &body)));
    let entry = read_message(&mut stream);
    assert_eq!((entry.id, entry.op), (2, 0x64), "{entry:02x?}");
    // typesOnly: the attribute comes with an empty SET of values.
    assert!(entry.body.ends_with(&[0x04, 0x02, b'c', b'n', 0x31, 0x00]), "{entry:02x?}");
    assert_eq!(expect_response(&mut stream, 2, SEARCH_RESULT_DONE).code, 0);
}
