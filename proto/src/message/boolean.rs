//! BOOLEAN TRUE as peers send it. RFC 4511 §5.1 wants `FF`, and the decoder's DER rules
//! (needed to refuse constructed OCTET STRINGs) insist on it; slapd takes any non-zero
//! octet as TRUE, and BER encoders such as pyasn1's send `01`. So a PDU that failed only for
//! that is decoded once more from a copy with those octets set to `FF` (a rare path: the
//! common one decodes once).

use crate::frame::{parse_header, CLASS_CONTEXT, CLASS_UNIVERSAL};

/// The most elements one walk visits; `check_frame` bounds the PDU, this bounds the loop.
const ELEMENTS_MAX: usize = 1 << 20;

/// A copy of `ber` (whole elements, as `check_frame` accepted them) where every BOOLEAN
/// whose content octet is neither `00` nor `FF` holds `FF`. The BOOLEANs of RFC 4511 are
/// the universal ones (typesOnly, deleteoldrdn, criticality) and the `[4]` dnAttributes of
/// an extensible match, which is the only primitive `[4]` of a request. Only constructed
/// elements are entered, so no string content is ever changed.
pub(super) fn true_as_ff(ber: &[u8]) -> Vec<u8> {
    let mut out = ber.to_vec();
    let mut pending = vec![(0usize, ber.len())];
    let mut visited = 0;
    while let Some((mut position, end)) = pending.pop() {
        while position < end && visited < ELEMENTS_MAX {
            visited += 1;
            let Some(element) = ber.get(position..end) else { break };
            let Ok(Some(header)) = parse_header(element) else { break };
            let Some(element_end) = header.end().and_then(|len| position.checked_add(len)) else { break };
            if element_end > end {
                break;
            }
            let content = position + header.header_len;
            let is_boolean = !header.constructed
                && header.content_len == 1
                && matches!((header.class, header.tag_number), (CLASS_UNIVERSAL, 1) | (CLASS_CONTEXT, 4));
            if header.constructed {
                pending.push((content, element_end));
            } else if is_boolean && !matches!(ber.get(content), Some(0x00 | 0xff)) {
                if let Some(octet) = out.get_mut(content) {
                    *octet = 0xff;
                }
            }
            position = element_end;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_boolean_octets_change() {
        // SEQUENCE { BOOLEAN 01, OCTET STRING "\x01\x01\x01", [4] 07, [4] constructed, BOOLEAN 00 }
        let ber = [
            0x30, 0x13, 0x01, 0x01, 0x01, 0x04, 0x03, 0x01, 0x01, 0x01, 0x84, 0x01, 0x07, 0xa4, 0x03, 0x01,
            0x01, 0x05, 0x01, 0x01, 0x00,
        ];
        let expected = [
            0x30, 0x13, 0x01, 0x01, 0xff, 0x04, 0x03, 0x01, 0x01, 0x01, 0x84, 0x01, 0xff, 0xa4, 0x03, 0x01,
            0x01, 0xff, 0x01, 0x01, 0x00,
        ];
        assert_eq!(true_as_ff(&ber), expected);
    }

    #[test]
    fn broken_input_is_copied_as_it_is() {
        for ber in [&[0x30, 0x05, 0x01][..], &[0x30, 0x03, 0x01, 0x01, 0x05, 0x01], &[], &[0x01, 0x80]] {
            assert_eq!(true_as_ff(ber).len(), ber.len());
        }
    }
}
