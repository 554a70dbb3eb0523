//! Find one whole LDAPMessage in a byte stream before any decoder sees it (CONTRIBUTING.md: check, then
//! parse).
//!
//! [`check_frame`] reads the outer header, refuses a PDU that would be too large as soon as
//! its length octets are in, waits until the whole PDU is buffered, and then walks every TLV
//! inside it with an explicit stack (no recursion: worker threads have small stacks). Only a
//! PDU that passes this walk is handed to [`crate::message::decode_message`], so the decoder
//! never sees an indefinite length, an element that overruns its parent, or nesting deeper
//! than [`FrameLimits::nesting_depth_max`].

/// Bounds on what one PDU may cost us before we decode it (CONTRIBUTING.md: bound everything).
#[derive(Debug, Clone, Copy)]
pub struct FrameLimits {
    /// The largest whole LDAPMessage, header included, that we accept.
    pub pdu_bytes_max: usize,
    /// The deepest nesting of constructed elements; the outer SEQUENCE is depth 1.
    pub nesting_depth_max: usize,
}

impl Default for FrameLimits {
    /// 16 MiB covers any sane entry (large jpegPhoto/certificate values included); 64 levels
    /// leave room for deeply nested filters while keeping the decoder's recursion shallow.
    fn default() -> Self {
        Self { pdu_bytes_max: 16 * 1024 * 1024, nesting_depth_max: 64 }
    }
}

/// Why a byte stream does not hold an acceptable LDAPMessage. Every variant is the peer's
/// fault; the connection cannot be resynchronised after any of them (RFC 4511 §4.1.1: send a
/// Notice of Disconnection and close).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// RFC 4511 §4.1.1: every LDAPMessage is a universal SEQUENCE (identifier 0x30).
    #[error("PDU does not start with a SEQUENCE (0x30)")]
    NotASequence,
    /// RFC 4511 §5.1: "Only the definite form of length encoding is used."
    #[error("indefinite length encoding is not allowed in LDAP")]
    IndefiniteLength,
    /// `len` counts the whole PDU, header included, as announced by its length octets.
    #[error("PDU of {len} bytes exceeds the limit of {max} bytes")]
    TooLong { len: usize, max: usize },
    #[error("PDU nests deeper than {max} constructed elements")]
    TooDeep { max: usize },
    #[error("malformed BER: {0}")]
    Malformed(&'static str),
}

/// The most length octets we accept in the long form (X.690 §8.1.3.5). Eight octets already
/// describe more than any limit we could configure; leading zero octets are allowed because
/// some encoders always use a fixed width (e.g. `0x84 00 00 00 05`).
const LENGTH_OCTETS_MAX: usize = 8;

/// The most octets a high-tag-number identifier may use after its first octet: 5 × 7 bits
/// hold any `u32` tag number.
const TAG_NUMBER_OCTETS_MAX: usize = 5;

/// The class bits of an identifier octet (X.690 §8.1.2.2), as numbers 0..=3.
pub(crate) const CLASS_UNIVERSAL: u8 = 0;
pub(crate) const CLASS_APPLICATION: u8 = 1;
pub(crate) const CLASS_CONTEXT: u8 = 2;

/// The identifier and length octets of one TLV (X.690 §8.1.2, §8.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// 0 universal, 1 application, 2 context-specific, 3 private (X.690 §8.1.2.2).
    pub class: u8,
    /// Bit 6 of the first identifier octet (X.690 §8.1.2.5).
    pub constructed: bool,
    pub tag_number: u32,
    /// Identifier plus length octets.
    pub header_len: usize,
    /// Contents octets announced by the length.
    pub content_len: usize,
}

impl Header {
    /// Offset just past the contents, or `None` if it does not fit in `usize`.
    pub fn end(&self) -> Option<usize> {
        self.header_len.checked_add(self.content_len)
    }
}

/// Parses the header at the start of `buf`. `Ok(None)` means `buf` ends inside the header.
/// The contents themselves are not required to be present.
pub(crate) fn parse_header(buf: &[u8]) -> Result<Option<Header>, FrameError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let class = first >> 6;
    let constructed = first & 0x20 != 0;
    let (tag_number, tag_len) = match first & 0x1F {
        0x1F => match parse_high_tag_number(buf.get(1..).unwrap_or_default())? {
            Some((number, octets)) => (number, 1 + octets),
            None => return Ok(None),
        },
        low => (u32::from(low), 1),
    };
    if class == CLASS_UNIVERSAL && tag_number == 0 {
        // X.690 §8.1.5: tag 0 is the end-of-contents marker, which only closes an
        // indefinite length, and those are never allowed here.
        return Err(FrameError::Malformed("end-of-contents octets outside an indefinite length"));
    }
    // Past the end of `buf` reads as empty: the length is not there yet.
    let Some((content_len, length_len)) = parse_length(buf.get(tag_len..).unwrap_or_default())? else {
        return Ok(None);
    };
    Ok(Some(Header { class, constructed, tag_number, header_len: tag_len + length_len, content_len }))
}

/// X.690 §8.1.2.4: base-128 tag number, bit 8 set on every octet but the last.
/// Returns the number and how many octets it used.
fn parse_high_tag_number(buf: &[u8]) -> Result<Option<(u32, usize)>, FrameError> {
    let mut number: u32 = 0;
    for (index, &octet) in buf.iter().enumerate() {
        if index >= TAG_NUMBER_OCTETS_MAX || number > (u32::MAX >> 7) {
            return Err(FrameError::Malformed("tag number too large"));
        }
        number = (number << 7) | u32::from(octet & 0x7F);
        if octet & 0x80 == 0 {
            return Ok(Some((number, index + 1)));
        }
    }
    Ok(None)
}

/// X.690 §8.1.3: short form, or long form with up to [`LENGTH_OCTETS_MAX`] octets.
/// Returns the length and how many octets it used.
fn parse_length(buf: &[u8]) -> Result<Option<(usize, usize)>, FrameError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    if first < 0x80 {
        return Ok(Some((usize::from(first), 1)));
    }
    if first == 0x80 {
        return Err(FrameError::IndefiniteLength);
    }
    let count = usize::from(first & 0x7F);
    if count > LENGTH_OCTETS_MAX {
        // Also covers 0xFF, reserved by X.690 §8.1.3.5 c.
        return Err(FrameError::Malformed("too many length octets"));
    }
    let Some(octets) = buf.get(1..1 + count) else {
        return Ok(None);
    };
    let mut length: u64 = 0;
    for &octet in octets {
        length = (length << 8) | u64::from(octet);
    }
    // On 32-bit targets a huge length saturates; the size limit then rejects it.
    let length = usize::try_from(length).unwrap_or(usize::MAX);
    Ok(Some((length, 1 + count)))
}

/// Whether `buf` starts with one whole, acceptable LDAPMessage.
///
/// - `Ok(None)`: not enough bytes yet; read more and call again with the longer buffer.
/// - `Ok(Some(n))`: `buf[..n]` is one whole LDAPMessage whose every element is well formed.
/// - `Err(_)`: the stream can never become valid; disconnect.
///
/// A PDU larger than [`FrameLimits::pdu_bytes_max`] is refused as soon as its header is in,
/// so a peer cannot make us buffer it.
pub fn check_frame(buf: &[u8], limits: &FrameLimits) -> Result<Option<usize>, FrameError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    if first != 0x30 {
        return Err(FrameError::NotASequence);
    }
    let Some(header) = parse_header(buf)? else {
        return Ok(None);
    };
    let pdu_len = header.end().unwrap_or(usize::MAX);
    if pdu_len > limits.pdu_bytes_max {
        return Err(FrameError::TooLong { len: pdu_len, max: limits.pdu_bytes_max });
    }
    let Some(pdu) = buf.get(..pdu_len) else {
        return Ok(None);
    };
    walk_elements(pdu, limits.nesting_depth_max)?;
    Ok(Some(pdu_len))
}

/// The size of the PDU that `buf` starts with, header included, as soon as its length
/// octets are in (`Ok(None)` before that). The connection uses it to reserve read-buffer
/// budget for the whole PDU at once; [`check_frame`] still checks everything else.
pub fn announced_pdu_bytes(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    if first != 0x30 {
        return Err(FrameError::NotASequence);
    }
    Ok(parse_header(buf)?.map(|header| header.end().unwrap_or(usize::MAX)))
}

/// Checks that `bytes` (a control's value, which the PDU's walk does not look into) is
/// well-formed BER nested no deeper than `depth_max`.
pub fn check_nesting(bytes: &[u8], depth_max: usize) -> Result<(), FrameError> {
    walk_elements(bytes, depth_max)
}

/// Visits every TLV of `pdu` (which starts with one constructed element and is exactly as
/// long as it), checking that each element fits inside its parent, that constructed elements
/// are exactly filled by their children, and that nesting stays within `depth_max`.
///
/// `open_ends` holds the end offset of every constructed element we are inside; its length
/// is the current depth. Children exactly filling a parent follows from two checks: no child
/// may end past its parent's end, and a parent is closed only when `position` lands exactly
/// on its end.
fn walk_elements(pdu: &[u8], depth_max: usize) -> Result<(), FrameError> {
    let mut open_ends: Vec<usize> = Vec::with_capacity(depth_max.min(64));
    let mut position = 0usize;
    loop {
        while open_ends.last() == Some(&position) {
            open_ends.pop();
        }
        if position == pdu.len() {
            return Ok(());
        }
        let parent_end = open_ends.last().copied().unwrap_or(pdu.len());
        let window = pdu.get(position..parent_end).ok_or(FrameError::Malformed("bad offsets"))?;
        let header =
            parse_header(window)?.ok_or(FrameError::Malformed("element header overruns its parent"))?;
        let end = header
            .end()
            .filter(|&len| len <= window.len())
            .ok_or(FrameError::Malformed("element overruns its parent"))?;
        if header.constructed {
            if open_ends.len() >= depth_max {
                return Err(FrameError::TooDeep { max: depth_max });
            }
            open_ends.push(position + end);
            position += header.header_len;
        } else {
            position += end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ldapsearch -x` anonymous simple bind, as captured on the wire.
    const ANON_BIND: [u8; 14] =
        [0x30, 0x0c, 0x02, 0x01, 0x01, 0x60, 0x07, 0x02, 0x01, 0x03, 0x04, 0x00, 0x80, 0x00];

    fn limits() -> FrameLimits {
        FrameLimits::default()
    }

    #[test]
    fn short_length_whole_pdu() {
        assert_eq!(check_frame(&ANON_BIND, &limits()), Ok(Some(14)));
    }

    #[test]
    fn announced_size_is_known_from_the_header() {
        assert_eq!(announced_pdu_bytes(&ANON_BIND[..1]), Ok(None));
        assert_eq!(announced_pdu_bytes(&ANON_BIND[..2]), Ok(Some(14)));
        assert_eq!(announced_pdu_bytes(&[0x30, 0x82, 0x01, 0x00]), Ok(Some(260)));
        assert_eq!(announced_pdu_bytes(&[0x31, 0x00]), Err(FrameError::NotASequence));
    }

    #[test]
    fn every_prefix_needs_more() {
        for end in 0..ANON_BIND.len() {
            assert_eq!(check_frame(&ANON_BIND[..end], &limits()), Ok(None), "prefix {end}");
        }
    }

    #[test]
    fn four_byte_long_lengths_with_leading_zeros() {
        // Same bind, but every length in the 0x84 form as some Java/AD encoders send it.
        let pdu = [
            0x30, 0x84, 0, 0, 0, 0x14, // LDAPMessage
            0x02, 0x84, 0, 0, 0, 0x01, 0x01, // messageID 1
            0x60, 0x84, 0, 0, 0, 0x07, // BindRequest
            0x02, 0x01, 0x03, 0x04, 0x00, 0x80, 0x00,
        ];
        assert_eq!(check_frame(&pdu, &limits()), Ok(Some(pdu.len())));
        for end in 0..pdu.len() {
            assert_eq!(check_frame(&pdu[..end], &limits()), Ok(None), "prefix {end}");
        }
    }

    #[test]
    fn long_form_one_and_two_octets() {
        let mut pdu = vec![0x30, 0x81, 0x83, 0x04, 0x81, 0x80];
        pdu.extend(vec![b'x'; 0x80]);
        assert_eq!(check_frame(&pdu, &limits()), Ok(Some(pdu.len())));
        let mut pdu = vec![0x30, 0x82, 0x01, 0x04, 0x04, 0x82, 0x01, 0x00];
        pdu.extend(vec![b'y'; 0x100]);
        assert_eq!(check_frame(&pdu, &limits()), Ok(Some(pdu.len())));
        // Eight length octets are still fine.
        let pdu = [0x30, 0x88, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x05, 0x00];
        assert_eq!(check_frame(&pdu, &limits()), Ok(Some(pdu.len())));
    }

    #[test]
    fn two_pdus_back_to_back() {
        let mut stream = ANON_BIND.to_vec();
        let unbind = [0x30, 0x05, 0x02, 0x01, 0x02, 0x42, 0x00];
        stream.extend_from_slice(&unbind);
        assert_eq!(check_frame(&stream, &limits()), Ok(Some(14)));
        assert_eq!(check_frame(&stream[14..], &limits()), Ok(Some(unbind.len())));
    }

    #[test]
    fn not_a_sequence() {
        assert_eq!(check_frame(&[0x31, 0x00], &limits()), Err(FrameError::NotASequence));
        assert_eq!(check_frame(&[0x10, 0x00], &limits()), Err(FrameError::NotASequence));
    }

    #[test]
    fn indefinite_length_rejected_outside_and_inside() {
        assert_eq!(check_frame(&[0x30, 0x80], &limits()), Err(FrameError::IndefiniteLength));
        let inner = [0x30, 0x07, 0x02, 0x01, 0x01, 0x42, 0x80, 0x00, 0x00];
        assert_eq!(check_frame(&inner, &limits()), Err(FrameError::IndefiniteLength));
    }

    #[test]
    fn too_long_rejected_from_header_alone() {
        let small = FrameLimits { pdu_bytes_max: 100, nesting_depth_max: 64 };
        assert_eq!(
            check_frame(&[0x30, 0x84, 0x00, 0x00, 0x01, 0x00], &small),
            Err(FrameError::TooLong { len: 262, max: 100 })
        );
        // A length that cannot be represented at all is too long, not an overflow.
        let huge = [0x30, 0x88, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(check_frame(&huge, &limits()), Err(FrameError::TooLong { .. })));
        // Exactly at the limit is fine.
        let exact = FrameLimits { pdu_bytes_max: 14, nesting_depth_max: 64 };
        assert_eq!(check_frame(&ANON_BIND, &exact), Ok(Some(14)));
    }

    #[test]
    fn too_many_length_octets_rejected() {
        let nine = [0x30, 0x89, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(matches!(check_frame(&nine, &limits()), Err(FrameError::Malformed(_))));
        assert!(matches!(check_frame(&[0x30, 0xff], &limits()), Err(FrameError::Malformed(_))));
    }

    /// `depth` nested SEQUENCEs with an empty NULL at the bottom.
    fn nested(depth: usize) -> Vec<u8> {
        let mut pdu = vec![0x05, 0x00];
        for _ in 0..depth {
            let mut outer = vec![0x30];
            outer.extend(encode_len(pdu.len()));
            outer.extend(pdu);
            pdu = outer;
        }
        pdu
    }

    fn encode_len(len: usize) -> Vec<u8> {
        if len < 0x80 {
            vec![len as u8]
        } else {
            vec![0x83, (len >> 16) as u8, (len >> 8) as u8, len as u8]
        }
    }

    #[test]
    fn depth_limit() {
        let limits = FrameLimits { pdu_bytes_max: 1 << 20, nesting_depth_max: 8 };
        let ok = nested(8);
        assert_eq!(check_frame(&ok, &limits), Ok(Some(ok.len())));
        assert_eq!(check_frame(&nested(9), &limits), Err(FrameError::TooDeep { max: 8 }));
        // Far deeper than any stack could recurse, still no overflow.
        let deep = nested(20_000);
        assert!(check_frame(&deep, &FrameLimits::default()).is_err());
    }

    #[test]
    fn children_overrunning_parent_rejected() {
        // BindRequest claims 7 bytes, its OCTET STRING child claims 9.
        let pdu = [0x30, 0x0c, 0x02, 0x01, 0x01, 0x60, 0x07, 0x02, 0x01, 0x03, 0x04, 0x09, 0x80, 0x00];
        assert!(matches!(check_frame(&pdu, &limits()), Err(FrameError::Malformed(_))));
        // Child header cut by the parent's end.
        let pdu = [0x30, 0x04, 0x02, 0x01, 0x01, 0x04];
        assert!(matches!(check_frame(&pdu, &limits()), Err(FrameError::Malformed(_))));
    }

    #[test]
    fn children_underfilling_parent_rejected() {
        // Inner SEQUENCE claims 3 bytes but holds a 2-byte NULL and one stray byte that is
        // itself the start of a truncated element.
        let pdu = [0x30, 0x05, 0x30, 0x03, 0x05, 0x00, 0x04];
        assert!(matches!(check_frame(&pdu, &limits()), Err(FrameError::Malformed(_))));
    }

    #[test]
    fn end_of_contents_marker_rejected() {
        let pdu = [0x30, 0x05, 0x02, 0x01, 0x01, 0x00, 0x00];
        assert!(matches!(check_frame(&pdu, &limits()), Err(FrameError::Malformed(_))));
    }

    #[test]
    fn multi_byte_tags() {
        // [APPLICATION 200] constructed (0x7f 0x81 0x48) holding [PRIVATE 31] primitive.
        let pdu = [0x30, 0x0a, 0x02, 0x01, 0x01, 0x7f, 0x81, 0x48, 0x03, 0xdf, 0x1f, 0x00];
        assert_eq!(check_frame(&pdu, &limits()), Ok(Some(pdu.len())));
        for end in 0..pdu.len() {
            assert_eq!(check_frame(&pdu[..end], &limits()), Ok(None), "prefix {end}");
        }
        let header = parse_header(&pdu[5..]).unwrap().unwrap();
        assert_eq!((header.class, header.constructed, header.tag_number), (1, true, 200));
        // A tag number that does not fit u32 is malformed, not a wrap-around.
        let pdu = [0x30, 0x08, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00];
        assert!(matches!(check_frame(&pdu, &limits()), Err(FrameError::Malformed(_))));
    }

    #[test]
    fn empty_constructed_elements() {
        let pdu = [0x30, 0x06, 0x30, 0x00, 0x31, 0x00, 0xa0, 0x00];
        assert_eq!(check_frame(&pdu, &limits()), Ok(Some(pdu.len())));
    }
}
