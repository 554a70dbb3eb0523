//! RFC 4515 filter strings: `parse_filter` never panics; a parsed filter prints to a string
//! that parses back to the same filter, and its BER encoding decodes to it too.
#![no_main]

use ferrodir_proto::filter::{parse_filter, Filter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(filter) = parse_filter(text) else { return };
    let printed = filter.to_string();
    let reparsed = parse_filter(&printed).unwrap_or_else(|e| panic!("{printed:?} does not parse: {e}"));
    assert_eq!(reparsed, filter, "{text:?} printed as {printed:?}");
    let encoded = rasn::ber::encode(&filter).expect("a parsed filter encodes");
    let decoded: Filter = rasn::der::decode(&encoded).expect("its encoding decodes");
    assert_eq!(decoded, filter);
});
