//! Filters as BER (the decoder options the server uses): never panics; a decoded filter
//! re-encodes to what decodes to it again, and the string form of one that RFC 4515 can
//! express, when it parses, prints the same again (a fixpoint).
#![no_main]

use ferrodir_proto::filter::{parse_filter, Filter};
use libfuzzer_sys::fuzz_target;

/// Whether the string form can say what `filter` says: every substring filter in it is
/// well-formed (the wire can carry other orders and empty values, a string cannot).
fn expressible(filter: &Filter) -> bool {
    match filter {
        Filter::And(children) | Filter::Or(children) => children.iter().all(expressible),
        Filter::Not(child) => expressible(child),
        Filter::Substrings(substrings) => substrings.is_well_formed(),
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
