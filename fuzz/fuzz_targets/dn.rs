//! RFC 4514 DNs: `Dn::parse` never panics; a parsed DN prints to a string that parses to a
//! DN with the same normalized form, and printing that again gives the same string.
#![no_main]

use ferrodir_proto::value::PlainAvas;
use ferrodir_proto::Dn;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(dn) = Dn::parse(text) else { return };
    let printed = dn.to_string();
    let reparsed = Dn::parse(&printed).unwrap_or_else(|e| panic!("{text:?} printed as {printed:?}: {e}"));
    assert_eq!(reparsed.normalized(&PlainAvas), dn.normalized(&PlainAvas), "{text:?} printed as {printed:?}");
    assert_eq!(reparsed.to_string(), printed);
    if let Some(parent) = dn.parent() {
        assert!(dn.is_descendant_or_self_of(&parent, &PlainAvas));
    }
});
