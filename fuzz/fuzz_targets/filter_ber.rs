//! Filters as BER (the decoder options the server uses): never panics; a decoded filter
//! re-encodes to what decodes to it again, and the string form of one that RFC 4515 can
//! express, when it parses, prints the same again (a fixpoint).
#![no_main]

use ferrodir_proto::filter::{parse_filter, Filter, Substring};
use libfuzzer_sys::fuzz_target;

/// Whether the string form can say what `filter` says: RFC 4511 §4.5.1.7.2 substrings (at
/// most one initial, first; at most one final, last; no empty value). The wire can carry
/// other orders, which a string cannot write.
fn expressible(filter: &Filter) -> bool {
    match filter {
        Filter::And(children) | Filter::Or(children) => children.iter().all(expressible),
        Filter::Not(child) => expressible(child),
        Filter::Substrings(substrings) => {
            let parts = &substrings.substrings;
            let last = parts.len().saturating_sub(1);
            !parts.is_empty()
                && parts.iter().enumerate().all(|(index, part)| match part {
                    Substring::Initial(value) => index == 0 && !value.is_empty(),
                    Substring::Any(value) => !value.is_empty(),
                    Substring::Final(value) => index == last && !value.is_empty(),
                })
        }
        _ => true,
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(filter) = rasn::der::decode::<Filter>(data) else { return };
    let encoded = rasn::ber::encode(&filter).expect("a decoded filter encodes");
    let decoded: Filter = rasn::der::decode(&encoded).expect("its encoding decodes");
    assert_eq!(decoded, filter);
    if !expressible(&filter) {
        return;
    }
    let printed = filter.to_string();
    if let Ok(reparsed) = parse_filter(&printed) {
        assert_eq!(reparsed.to_string(), printed, "string form is not a fixpoint");
    }
});
