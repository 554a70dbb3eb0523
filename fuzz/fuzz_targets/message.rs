//! The server's decode path: `check_frame`, then `decode_message`. Never panics; whatever
//! decodes re-encodes, and the re-encoding decodes to the same message and re-encodes to
//! the same bytes (our encoder is canonical even when the input BER was not).
#![no_main]

use ferrodir_proto::frame::{check_frame, FrameLimits};
use ferrodir_proto::message::{decode_message, encode_message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = FrameLimits::default();
    let Ok(Some(len)) = check_frame(data, &limits) else { return };
    let Ok(message) = decode_message(&data[..len]) else { return };
    let encoded = encode_message(&message).expect("a decoded message encodes");
    assert_eq!(check_frame(&encoded, &limits), Ok(Some(encoded.len())), "our encoding frames");
    let again = decode_message(&encoded).expect("our encoding decodes");
    assert_eq!(again, message, "decode(encode(m)) == m");
    assert_eq!(encode_message(&again).expect("encodes"), encoded, "the encoding is stable");
});
