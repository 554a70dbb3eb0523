//! `check_frame` on arbitrary bytes: never panics, and an accepted length is within the
//! input and the limits; framing a stream frame by frame consumes it without looping.
#![no_main]

use ferrodir_proto::frame::{check_frame, FrameLimits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Small limits too, so that the size and depth refusals are reached.
    for limits in [FrameLimits::default(), FrameLimits { pdu_bytes_max: 64, nesting_depth_max: 4 }] {
        let mut rest = data;
        while let Ok(Some(len)) = check_frame(rest, &limits) {
            assert!(len > 0 && len <= rest.len(), "frame of {len} bytes in {} bytes", rest.len());
            assert!(len <= limits.pdu_bytes_max);
            rest = &rest[len..];
        }
    }
});
