//! RFC 2849 LDIF: reading arbitrary bytes never panics (file: URLs off, as for untrusted
//! input), and a bounded number of records comes out of a bounded input.
#![no_main]

use ferrodir_proto::ldif::{write_entry, LdifReader, LdifRecord};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let reader = LdifReader::new(data).allow_file_urls(false);
    for (count, record) in reader.enumerate() {
        assert!(count <= data.len(), "more records than input bytes");
        // What import writes back out must be readable LDIF again.
        if let Ok((_, LdifRecord::Content { dn, attrs })) = record {
            let mut out = Vec::new();
            write_entry(&mut out, &dn, &attrs).expect("writing to a Vec");
            let mut again = LdifReader::new(&out[..]).allow_file_urls(false);
            match again.next() {
                Some(Ok((_, LdifRecord::Content { dn: dn2, attrs: attrs2 }))) => {
                    assert_eq!((dn2, attrs2), (dn, attrs), "write_entry then read");
                }
                other => panic!("written entry reads back as {other:?}"),
            }
        }
    }
});
