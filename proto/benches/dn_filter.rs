//! String-form parsing micro-benchmarks: DNs (RFC 4514) with normalisation, and filters
//! (RFC 4515).
//!
//! DN normalisation here uses proto's built-in rules (caseIgnoreMatch for every type but a
//! few octet ones): the server installs a schema-aware normaliser at start, which this
//! crate cannot build on its own; shard/benches/eval.rs measures that one.
//!
//! `cargo bench -p ferrodir-proto --bench dn_filter` (add `-- --quick` for a rough pass).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use ferrodir_proto::filter::parse_filter;
use ferrodir_proto::Dn;

const SIMPLE_DN: &str = "uid=user01234,ou=People,dc=example,dc=com";
/// A multi-valued RDN, hex-escaped UTF-8, an escaped comma and escaped spaces.
const ESCAPED_DN: &str =
    r"CN=Jos\C3\A9 M\C3\BCller+UID=jmuller,OU=R\26D\, Labs,O=Acme\20Corp,DC=Example,DC=COM";
const NESTED_FILTER: &str = "(&(objectClass=inetOrgPerson)(|(uid=user01234)(mail=user01234@example.com)\
                             (cn=user 12*))(!(employeeType=contractor))(telephoneNumber>=+1 555 0000))";

fn dn_filter(c: &mut Criterion) {
    for text in [SIMPLE_DN, ESCAPED_DN] {
        assert!(Dn::parse(text).is_ok(), "{text}");
    }
    assert!(parse_filter(NESTED_FILTER).is_ok());

    let mut group = c.benchmark_group("dn_filter");
    group.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    group.bench_function("dn_parse_normalize_simple", |b| {
        b.iter(|| Dn::parse(black_box(SIMPLE_DN)).map(|dn| dn.normalized(&ferrodir_proto::value::PlainAvas)))
    });
    group.bench_function("dn_parse_normalize_escaped_multivalued", |b| {
        b.iter(|| Dn::parse(black_box(ESCAPED_DN)).map(|dn| dn.normalized(&ferrodir_proto::value::PlainAvas)))
    });
    group.bench_function("parse_filter_nested", |b| b.iter(|| parse_filter(black_box(NESTED_FILTER))));
    group.finish();
}

criterion_group!(benches, dn_filter);
criterion_main!(benches);
