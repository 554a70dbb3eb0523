//! Wire-format micro-benchmarks: what one request costs to frame and decode, and one
//! search result to encode, before any directory work.
//!
//! `cargo bench -p ferrodir-proto --bench codec` (add `-- --quick` for a rough pass).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferrodir_proto::filter::Filter;
use ferrodir_proto::frame::{check_frame, FrameLimits};
use ferrodir_proto::message::{
    decode_message, encode_message, AuthenticationChoice, BindRequest, DerefAliases, LdapMessage,
    OctetString, PartialAttribute, ProtocolOp, SearchRequest, SearchResultEntry, SearchScope,
};

fn os(text: &str) -> OctetString {
    OctetString::from(text.as_bytes())
}

fn message(message_id: u32, protocol_op: ProtocolOp) -> LdapMessage {
    LdapMessage { message_id, protocol_op, controls: None }
}

/// `ldapsearch -x -b dc=example,dc=com '(uid=user01234)' cn mail telephoneNumber`.
fn search_request_pdu() -> Vec<u8> {
    let search = SearchRequest {
        base_object: os("dc=example,dc=com"),
        scope: SearchScope::WholeSubtree,
        deref_aliases: DerefAliases::NeverDerefAliases,
        size_limit: 0,
        time_limit: 0,
        types_only: false,
        filter: Filter::equality("uid", "user01234"),
        attributes: vec![os("cn"), os("mail"), os("telephoneNumber")],
    };
    encode_message(&message(2, ProtocolOp::SearchRequest(search))).expect("encodes")
}

/// `ldapwhoami -x -D cn=admin,dc=example,dc=com -w secret`.
fn bind_request_pdu() -> Vec<u8> {
    let bind = BindRequest {
        version: 3,
        name: os("cn=admin,dc=example,dc=com"),
        authentication: AuthenticationChoice::Simple(os("secret")),
    };
    encode_message(&message(1, ProtocolOp::BindRequest(bind))).expect("encodes")
}

fn attribute(name: &str, values: &[&str]) -> PartialAttribute {
    PartialAttribute { r#type: os(name), vals: values.iter().map(|v| os(v)).collect() }
}

/// An inetOrgPerson as bench/gen-data.py makes them, returned with all user attributes:
/// ten attributes, thirteen values.
fn person_entry() -> SearchResultEntry {
    SearchResultEntry {
        object_name: os("uid=user01234,ou=people,dc=example,dc=com"),
        attributes: vec![
            attribute("objectClass", &["top", "person", "organizationalPerson", "inetOrgPerson"]),
            attribute("uid", &["user01234"]),
            attribute("cn", &["user 1234"]),
            attribute("sn", &["1234"]),
            attribute("givenName", &["User"]),
            attribute("mail", &["user01234@example.com"]),
            attribute("telephoneNumber", &["+1 555 1234"]),
            attribute("title", &["Engineer"]),
            attribute("l", &["Springfield"]),
            attribute("employeeNumber", &["1234"]),
        ],
    }
}

/// The person entry padded with description values until the PDU is about 2 KiB.
fn pdu_2kib() -> Vec<u8> {
    let mut entry = person_entry();
    let line = "x".repeat(90);
    let mut descriptions = Vec::new();
    loop {
        entry.attributes.retain(|a| a.r#type != os("description"));
        entry
            .attributes
            .push(attribute("description", &descriptions.iter().map(String::as_str).collect::<Vec<_>>()));
        let pdu = encode_message(&message(7, ProtocolOp::SearchResultEntry(entry.clone()))).expect("encodes");
        if pdu.len() >= 2048 - 100 {
            return pdu;
        }
        descriptions.push(format!("{:03} {line}", descriptions.len()));
    }
}

fn short(c: &mut Criterion) -> criterion::BenchmarkGroup<'_, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group("codec");
    group.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    group
}

fn codec(c: &mut Criterion) {
    let search = search_request_pdu();
    let bind = bind_request_pdu();
    let entry = message(2, ProtocolOp::SearchResultEntry(person_entry()));
    let big = pdu_2kib();
    let limits = FrameLimits::default();
    assert_eq!(check_frame(&big, &limits), Ok(Some(big.len())));
    assert!(decode_message(&search).is_ok() && decode_message(&bind).is_ok());

    let mut group = short(c);
    group.bench_function("decode_search_request", |b| b.iter(|| decode_message(black_box(&search))));
    group.bench_function("decode_bind_request", |b| b.iter(|| decode_message(black_box(&bind))));
    group.bench_function("encode_search_result_entry_10_attrs", |b| {
        b.iter(|| encode_message(black_box(&entry)))
    });
    group.throughput(Throughput::Bytes(big.len() as u64));
    group.bench_function("check_frame_2kib", |b| b.iter(|| check_frame(black_box(&big), &limits)));
    group.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
