//! Filter evaluation micro-benchmarks: the per-candidate cost of a search once an entry is
//! in hand, with the matching rules of the standard schema (as the server runs it).
//!
//! `cargo bench -p ferrodir-shard --bench eval` (add `-- --quick` for a rough pass).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use ferrodir_proto::entry::{Attribute, Entry};
use ferrodir_proto::filter::{parse_filter, Filter};
use ferrodir_proto::schema::Schema;
use ferrodir_shard::filter_matches;
use ferrodir_shard::RuleTable;

/// An inetOrgPerson as bench/gen-data.py makes them, plus a few common attributes: twelve
/// attributes, fifteen values.
fn person() -> Entry {
    let attribute = |name: &str, values: &[&str]| {
        Attribute::new(name, values.iter().map(|v| v.as_bytes().to_vec()).collect())
    };
    Entry::new(vec![
        attribute("objectClass", &["top", "person", "organizationalPerson", "inetOrgPerson"]),
        attribute("uid", &["user01234"]),
        attribute("cn", &["user 1234"]),
        attribute("sn", &["1234"]),
        attribute("givenName", &["User"]),
        attribute("mail", &["user01234@example.com"]),
        attribute("telephoneNumber", &["+1 555 1234"]),
        attribute("userPassword", &["password1234"]),
        attribute("title", &["Engineer"]),
        attribute("l", &["Springfield"]),
        attribute("employeeNumber", &["1234"]),
        attribute("description", &["A user made for benchmarks"]),
    ])
}

fn filter(text: &str) -> Filter {
    parse_filter(text).expect("benchmark filters parse")
}

fn eval(c: &mut Criterion) {
    let rules = Arc::new(RuleTable::from_schema(&Schema::standard()));
    let entry = person();
    let cases = [
        ("equality", filter("(uid=user01234)"), true),
        ("equality_miss", filter("(uid=user09999)"), false),
        ("substring", filter("(mail=user01*@example.com)"), true),
        ("and3", filter("(&(objectClass=person)(uid=user01234)(mail=user01234@example.com))"), true),
    ];
    for (name, filter, expected) in &cases {
        assert_eq!(filter_matches(&rules, filter, &entry, None), *expected, "{name}");
    }

    let mut group = c.benchmark_group("eval");
    group.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    for (name, filter, _) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| filter_matches(&rules, black_box(filter), black_box(&entry), None))
        });
    }
    // The schema's DN normaliser, as the server's rule table carries it.
    let dn = "uid=user01234,ou=People,dc=example,dc=com";
    group.bench_function("dn_parse_normalize_schema", |b| {
        b.iter(|| rules.dn().parse(black_box(dn)).map(|dn| dn.joined()))
    });
    group.finish();
}

criterion_group!(benches, eval);
criterion_main!(benches);
