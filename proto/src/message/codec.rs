//! Reading and writing whole LDAPMessages. The outer SEQUENCE and the messageID are handled
//! by hand, so that the ID is known before `rasn` touches the protocolOp (CONTRIBUTING.md,
//! "Check, then parse": decode the message ID first), and so that the outer header can be
//! written after the body's length is known without encoding twice.

use rasn::ber::de::DecoderOptions;
use rasn::ber::enc::EncoderOptions;
use rasn::error::DecodeErrorKind;
use rasn::types::{Class, Tag};
use rasn::{Decode, Encode};

use super::{
    boolean, Control, DecodeError, DecodeFault, EncodeError, LdapMessage, ProtocolOp, UnknownEnumerated,
    MESSAGE_ID_MAX,
};
use crate::frame::{parse_header, Header, CLASS_APPLICATION, CLASS_CONTEXT, CLASS_UNIVERSAL};

impl DecodeError {
    fn without_id(reason: impl Into<String>) -> Self {
        Self { message_id: None, fault: DecodeFault::Malformed, reason: reason.into() }
    }
}

/// The decoder options for everything inside the LDAPMessage. DER's rules, because RFC 4511
/// §5.1 forbids the constructed form of OCTET STRING (which plain BER allows, and `rasn`
/// would gather into one string). slapd never gathers either: liblber takes the segments'
/// raw bytes as the string, so a constructed baseObject is an invalid DN there; here it is
/// a decoding error. DER also wants BOOLEAN TRUE as `FF`, which `boolean.rs` relaxes to
/// slapd's any-non-zero. Indefinite lengths never get here (`check_frame`), and `rasn` still
/// takes non-minimal lengths and INTEGERs in this mode, which BER senders in the wild produce.
pub(super) const LDAP_DECODER: DecoderOptions = DecoderOptions::der();

/// A control's value that must be exactly one `T`, decoded with the message's rules:
/// nothing may follow it.
pub(super) fn decode_whole<T: rasn::Decode>(bytes: &[u8]) -> Result<T, String> {
    let mut decoder = rasn::ber::de::Decoder::new(bytes, LDAP_DECODER);
    let value = T::decode(&mut decoder).map_err(|e| e.to_string())?;
    if !decoder.remaining().is_empty() {
        return Err("bytes after the control value".to_string());
    }
    Ok(value)
}

/// Decodes one LDAPMessage; `pdu` must be exactly one message, as found by
/// [`crate::frame::check_frame`] (which also bounds its size and nesting).
///
/// The outer SEQUENCE and the messageID are read by hand first, cheaply; then `rasn`
/// decodes the protocolOp and controls. A malformed or unknown protocolOp still yields the
/// messageID in the error.
pub fn decode_message(pdu: &[u8]) -> Result<LdapMessage, DecodeError> {
    let content = outer_sequence_content(pdu)?;
    let (message_id, after_id) = decode_message_id(content)?;
    let fail = |fault, reason: String| DecodeError { message_id: Some(message_id), fault, reason };
    if let Ok(Some(header)) = parse_header(after_id) {
        if !is_protocol_op_tag(&header) {
            let reason = format!("unrecognized protocolOp tag {}", describe_tag(&header));
            return Err(fail(DecodeFault::Malformed, reason));
        }
    }
    let body = match decode_body(after_id) {
        Err(BodyFailure::Rasn(_, error)) if is_lenient_boolean(&error) => {
            decode_body(&boolean::true_as_ff(after_id))
        }
        other => other,
    };
    match body {
        Ok((protocol_op, controls)) => Ok(LdapMessage { message_id, protocol_op, controls }),
        Err(BodyFailure::Rasn(part, error)) => {
            let fault =
                unknown_enumerated(&error).map_or(DecodeFault::Malformed, DecodeFault::UnknownEnumerated);
            Err(fail(fault, format!("{part}: {error}")))
        }
        Err(BodyFailure::Trailing(reason)) => Err(fail(DecodeFault::Malformed, reason)),
    }
}

/// Why the part of an LDAPMessage after the messageID did not decode.
enum BodyFailure {
    /// `rasn` refused the protocolOp or the controls (named by the `&str`).
    Rasn(&'static str, rasn::error::DecodeError),
    /// What follows them is not well-formed.
    Trailing(String),
}

/// The protocolOp, the controls and any unrecognized trailing components.
fn decode_body(bytes: &[u8]) -> Result<(ProtocolOp, Option<Vec<Control>>), BodyFailure> {
    let mut decoder = rasn::ber::de::Decoder::new(bytes, LDAP_DECODER);
    let protocol_op = ProtocolOp::decode(&mut decoder).map_err(|e| BodyFailure::Rasn("protocolOp", e))?;
    let controls = if decoder.remaining().first() == Some(&0xa0) {
        let controls = <Vec<Control>>::decode_with_tag(&mut decoder, Tag::new(Class::Context, 0))
            .map_err(|e| BodyFailure::Rasn("controls", e))?;
        Some(controls)
    } else {
        None
    };
    skip_unrecognized_components(decoder.remaining()).map_err(BodyFailure::Trailing)?;
    Ok((protocol_op, controls))
}

/// Whether `error` is a BOOLEAN that is neither `00` nor `FF` (see [`boolean`]).
fn is_lenient_boolean(error: &rasn::error::DecodeError) -> bool {
    error.matches_root_cause(|kind| matches!(kind, DecodeErrorKind::InvalidBool { .. }))
}

/// Which ENUMERATED held a value its type does not define, if that is why `error` happened.
/// `rasn` names the field in the errors wrapped around the root cause; the innermost wins.
fn unknown_enumerated(error: &rasn::error::DecodeError) -> Option<UnknownEnumerated> {
    let mut field = "";
    let mut current = error;
    while let DecodeErrorKind::FieldError { name, nested } = &*current.kind {
        field = name;
        current = nested;
    }
    if !matches!(&*current.kind, DecodeErrorKind::DiscriminantValueNotFound { .. }) {
        return None;
    }
    match field {
        "SearchRequest.scope" => Some(UnknownEnumerated::SearchScope),
        "SearchRequest.deref_aliases" => Some(UnknownEnumerated::DerefAliases),
        "Change.operation" => Some(UnknownEnumerated::ModifyOperation),
        _ => None,
    }
}

/// The APPLICATION tags RFC 4511 assigns to operations (§4.2-§4.13; 17, 18, 20-22 unused).
fn is_protocol_op_tag(header: &Header) -> bool {
    header.class == CLASS_APPLICATION && matches!(header.tag_number, 0..=16 | 19 | 23..=25)
}

/// `[APPLICATION 30]`-style text for error messages and logs.
fn describe_tag(header: &Header) -> String {
    let class = match header.class {
        CLASS_UNIVERSAL => "UNIVERSAL",
        CLASS_APPLICATION => "APPLICATION",
        CLASS_CONTEXT => "CONTEXT",
        _ => "PRIVATE",
    };
    format!("[{class} {}]", header.tag_number)
}

/// Header of `bytes`, which must hold all of it and its contents.
fn complete_header(bytes: &[u8]) -> Result<(Header, usize), String> {
    let header = parse_header(bytes)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "truncated element header".to_string())?;
    match header.end() {
        Some(end) if end <= bytes.len() => Ok((header, end)),
        _ => Err("element longer than the data holding it".to_string()),
    }
}

/// The contents of the outer `LDAPMessage ::= SEQUENCE`, which must span all of `pdu`.
fn outer_sequence_content(pdu: &[u8]) -> Result<&[u8], DecodeError> {
    let (header, end) = complete_header(pdu).map_err(DecodeError::without_id)?;
    if header.class != CLASS_UNIVERSAL || !header.constructed || header.tag_number != 16 {
        return Err(DecodeError::without_id("LDAPMessage is not a SEQUENCE"));
    }
    if end != pdu.len() {
        return Err(DecodeError::without_id("bytes after the end of the LDAPMessage"));
    }
    pdu.get(header.header_len..end)
        .ok_or_else(|| DecodeError::without_id("LDAPMessage shorter than its header"))
}

/// RFC 4511 §4.1.1.1 `MessageID ::= INTEGER (0..maxInt)`. Redundant leading zero octets
/// are tolerated (BER from some encoders carries them); negative values and values above
/// maxInt are not. Returns the ID and the bytes after it.
fn decode_message_id(content: &[u8]) -> Result<(u32, &[u8]), DecodeError> {
    let (header, end) =
        complete_header(content).map_err(|e| DecodeError::without_id(format!("messageID: {e}")))?;
    if header.class != CLASS_UNIVERSAL || header.constructed || header.tag_number != 2 {
        return Err(DecodeError::without_id("messageID is not a primitive INTEGER"));
    }
    let octets =
        content.get(header.header_len..end).ok_or_else(|| DecodeError::without_id("messageID cut short"))?;
    match octets.first() {
        None => return Err(DecodeError::without_id("messageID has no content octets")),
        Some(first) if first & 0x80 != 0 => return Err(DecodeError::without_id("messageID is negative")),
        Some(_) => {}
    }
    let significant =
        octets.iter().position(|&b| b != 0).and_then(|start| octets.get(start..)).unwrap_or_default();
    let value = if significant.len() > 4 {
        None
    } else {
        Some(significant.iter().fold(0u32, |value, &b| (value << 8) | u32::from(b)))
    };
    match value {
        Some(id) if id <= MESSAGE_ID_MAX => Ok((id, content.get(end..).unwrap_or_default())),
        _ => Err(DecodeError::without_id("messageID above maxInt (2^31 - 1)")),
    }
}

/// RFC 4511 §4: trailing components we do not recognise are ignored, but they must still
/// be well-formed elements that fill the rest of the message exactly.
fn skip_unrecognized_components(mut rest: &[u8]) -> Result<(), String> {
    while !rest.is_empty() {
        let (header, end) = complete_header(rest).map_err(|e| format!("after protocolOp: {e}"))?;
        if header.class == CLASS_CONTEXT && header.tag_number == 0 {
            return Err("controls given twice or malformed".to_string());
        }
        rest = rest.get(end..).unwrap_or_default();
    }
    Ok(())
}

/// Encodes `message` as one BER LDAPMessage.
pub fn encode_message(message: &LdapMessage) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode_message_into(message, &mut out)?;
    Ok(out)
}

/// Appends the encoding of `message` to `out` (so several responses can share one write
/// buffer). On error `out` is left as it was.
pub fn encode_message_into(message: &LdapMessage, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    if message.message_id > MESSAGE_ID_MAX {
        return Err(EncodeError { reason: format!("messageID {} above maxInt", message.message_id) });
    }
    let mut encoder = rasn::ber::enc::Encoder::new(EncoderOptions::ber());
    message
        .protocol_op
        .encode(&mut encoder)
        .map_err(|e| EncodeError { reason: format!("protocolOp: {e}") })?;
    if let Some(controls) = &message.controls {
        controls
            .encode_with_tag(&mut encoder, Tag::new(Class::Context, 0))
            .map_err(|e| EncodeError { reason: format!("controls: {e}") })?;
    }
    let body = encoder.output();
    let id_octets = message_id_octets(message.message_id);
    let content_len = 2 + id_octets.len() + body.len();
    out.reserve(content_len + 6);
    out.push(0x30);
    push_length(out, content_len);
    out.push(0x02);
    out.push(id_octets.len() as u8);
    out.extend_from_slice(&id_octets);
    out.extend_from_slice(&body);
    Ok(())
}

/// The minimal two's-complement content octets of a non-negative messageID (X.690 §8.3.2).
fn message_id_octets(id: u32) -> Vec<u8> {
    let bytes = id.to_be_bytes();
    let first = bytes.iter().position(|&b| b != 0).unwrap_or(3);
    let significant = bytes.get(first..).unwrap_or(&bytes);
    let mut octets = Vec::with_capacity(5);
    if significant.first().is_some_and(|b| b & 0x80 != 0) {
        octets.push(0);
    }
    octets.extend_from_slice(significant);
    octets
}

/// X.690 §8.1.3: the definite form, short when it fits, else the minimal long form.
fn push_length(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
        return;
    }
    let bytes = len.to_be_bytes();
    let significant = bytes.iter().skip_while(|&&b| b == 0);
    out.push(0x80 | significant.clone().count() as u8);
    out.extend(significant);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{parse_filter, Filter};
    use crate::frame::{check_frame, FrameLimits};
    use crate::message::tests::{every_protocol_op, message, os, round_trip};
    use crate::message::{DerefAliases, OctetString, SearchRequest, SearchScope};

    #[test]
    fn unknown_protocol_op_keeps_message_id() {
        let pdu = [0x30, 0x05, 0x02, 0x01, 0x07, 0x7e, 0x00];
        assert_eq!(check_frame(&pdu, &FrameLimits::default()), Ok(Some(pdu.len())));
        assert_eq!(decode_message(&pdu).unwrap_err().message_id, Some(7));
        // High-tag-number APPLICATION 200, constructed.
        let pdu = [0x30, 0x08, 0x02, 0x02, 0x01, 0x00, 0x7f, 0x81, 0x48, 0x00];
        assert_eq!(check_frame(&pdu, &FrameLimits::default()), Ok(Some(pdu.len())));
        assert_eq!(decode_message(&pdu).unwrap_err().message_id, Some(256));
    }

    #[test]
    fn malformed_protocol_op_keeps_message_id() {
        let cases: [&[u8]; 6] = [
            // BindRequest whose version is an OCTET STRING.
            b"\x30\x0c\x02\x01\x2a\x60\x07\x04\x01\x03\x04\x00\x80\x00",
            // SearchRequest with an unknown scope.
            b"\x30\x1b\x02\x01\x2a\x63\x16\x04\x00\x0a\x01\x07\x0a\x01\x00\x02\x01\x00\x02\x01\x00\x01\x01\x00\x87\x01x\x30\x00",
            // No protocolOp at all.
            b"\x30\x03\x02\x01\x2a",
            // Unbind with content.
            b"\x30\x06\x02\x01\x2a\x42\x01\x00",
            // Controls that are not Controls.
            b"\x30\x09\x02\x01\x2a\x42\x00\xa0\x02\x05\x00",
            // Trailing junk that is not an element.
            b"\x30\x07\x02\x01\x2a\x42\x00\x04\x05",
        ];
        for pdu in cases {
            let error = decode_message(pdu).unwrap_err();
            assert_eq!(error.message_id, Some(42), "{pdu:02x?}: {error}");
        }
    }

    /// Short-form TLV, for building test PDUs (contents under 128 octets).
    fn tlv(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
        let content = parts.concat();
        assert!(content.len() < 0x80);
        [&[tag, content.len() as u8][..], &content].concat()
    }

    /// A SearchRequest with messageID 5 from its encoded fields.
    fn search_pdu(base: &[u8], scope: u8, deref: u8, types_only: u8, filter: &[u8]) -> Vec<u8> {
        let body = [
            base,
            &[
                0x0a, 0x01, scope, 0x0a, 0x01, deref, 0x02, 0x01, 0x00, 0x02, 0x01, 0x00, 0x01, 0x01,
                types_only,
            ],
            filter,
            &[0x30, 0x00],
        ];
        tlv(0x30, &[b"\x02\x01\x05", &tlv(0x63, &body)])
    }

    /// RFC 4511 §5.1: OCTET STRINGs only in the primitive form, under any tag. Each case is
    /// a valid PDU with one string sent constructed (two primitive segments).
    #[test]
    fn constructed_octet_strings_refused() {
        let split = |tag: u8| tlv(tag, &[b"\x04\x01o", b"\x04\x01x"]);
        let id: &[u8] = b"\x02\x01\x05";
        let present = tlv(0x87, &[b"cn"]);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            // baseObject as 24 06 04 01 'o' 04 01 'x': slapd refuses it.
            ("baseObject", search_pdu(&split(0x24), 0, 0, 0, &present)),
            ("DelRequest [APPLICATION 10]", tlv(0x30, &[id, &split(0x6a)])),
            ("simple password [0]", tlv(0x30, &[id, &tlv(0x60, &[b"\x02\x01\x03\x04\x00", &split(0xa0)])])),
            ("present filter [7]", search_pdu(b"\x04\x00", 0, 0, 0, &split(0xa7))),
            ("assertion value", search_pdu(b"\x04\x00", 0, 0, 0, &tlv(0xa3, &[b"\x04\x01c", &split(0x24)]))),
            (
                "attribute value",
                tlv(
                    0x30,
                    &[
                        id,
                        &tlv(
                            0x68,
                            &[
                                b"\x04\x03o=x",
                                &tlv(0x30, &[&tlv(0x30, &[b"\x04\x01o", &tlv(0x31, &[&split(0x24)])])]),
                            ],
                        ),
                    ],
                ),
            ),
            ("requestName [0]", tlv(0x30, &[id, &tlv(0x77, &[&split(0xa0)])])),
            ("controlType", tlv(0x30, &[id, b"\x42\x00", &tlv(0xa0, &[&tlv(0x30, &[&split(0x24)])])])),
        ];
        for (what, pdu) in cases {
            assert_eq!(check_frame(&pdu, &FrameLimits::default()), Ok(Some(pdu.len())), "{what}");
            let error = decode_message(&pdu).unwrap_err();
            assert_eq!((error.message_id, error.fault), (Some(5), DecodeFault::Malformed), "{what}: {error}");
        }
        // The same string in the primitive form decodes.
        assert!(decode_message(&search_pdu(b"\x04\x02ox", 0, 0, 0, &present)).is_ok());
    }

    /// An ENUMERATED value outside its range in well-formed BER is not a decoding error of the
    /// connection: the server answers the operation (slapd: protocolError).
    #[test]
    fn unknown_enumerated_names_the_operation() {
        let present = tlv(0x87, &[b"x"]);
        let scope = DecodeFault::UnknownEnumerated(UnknownEnumerated::SearchScope);
        let deref = DecodeFault::UnknownEnumerated(UnknownEnumerated::DerefAliases);
        let cases = [(4, 0, scope), (0x7f, 3, scope), (0xff, 0, scope), (0, 4, deref), (2, 9, deref)];
        for (scope_value, deref_value, fault) in cases {
            let pdu = search_pdu(b"\x04\x00", scope_value, deref_value, 0, &present);
            let error = decode_message(&pdu).unwrap_err();
            assert_eq!((error.message_id, error.fault), (Some(5), fault), "{error:?}");
        }
        assert!(decode_message(&search_pdu(b"\x04\x00", 3, 3, 0, &present)).is_ok());
        // ModifyRequest with operation 7.
        let change = tlv(0x30, &[b"\x0a\x01\x07", &tlv(0x30, &[b"\x04\x01o", b"\x31\x00"])]);
        let modify = tlv(0x30, &[b"\x02\x01\x05", &tlv(0x66, &[b"\x04\x03o=x", &tlv(0x30, &[&change])])]);
        let error = decode_message(&modify).unwrap_err();
        assert_eq!(
            error.fault,
            DecodeFault::UnknownEnumerated(UnknownEnumerated::ModifyOperation),
            "{error}"
        );
    }

    /// RFC 4511 §5.1 wants BOOLEAN TRUE as `FF`; slapd takes any non-zero octet, and so do
    /// we, in the protocolOp and in the controls, without letting a constructed string by.
    #[test]
    fn any_nonzero_boolean_is_true() {
        let present = tlv(0x87, &[b"x"]);
        for (octet, types_only) in [(0xff, true), (0x00, false), (0x01, true), (0x80, true)] {
            let decoded = decode_message(&search_pdu(b"\x04\x00", 0, 0, octet, &present)).unwrap();
            let ProtocolOp::SearchRequest(request) = decoded.protocol_op else { panic!("{decoded:?}") };
            assert_eq!(request.types_only, types_only, "{octet:#x}");
        }
        let control = tlv(0xa0, &[&tlv(0x30, &[b"\x04\x011", b"\x01\x01\x01"])]);
        let decoded = decode_message(&tlv(0x30, &[b"\x02\x01\x05\x42\x00", &control])).unwrap();
        assert!(decoded.controls.unwrap()[0].criticality);
        // A lenient BOOLEAN does not open the door to a constructed string after it.
        let split = tlv(0x24, &[b"\x04\x01o", b"\x04\x01x"]);
        let control = tlv(0xa0, &[&tlv(0x30, &[&split, b"\x01\x01\x01"])]);
        let error = decode_message(&tlv(0x30, &[b"\x02\x01\x05\x42\x00", &control])).unwrap_err();
        assert_eq!(error.fault, DecodeFault::Malformed);
        let typed = search_pdu(b"\x04\x00", 0, 0, 0x01, &tlv(0xa3, &[b"\x04\x01c", &split]));
        assert_eq!(decode_message(&typed).unwrap_err().fault, DecodeFault::Malformed);
    }

    #[test]
    fn unrecognized_trailing_components_ignored() {
        let pdu = [0x30, 0x0a, 0x02, 0x01, 0x01, 0x42, 0x00, 0x81, 0x01, 0x00, 0x30, 0x00];
        assert_eq!(decode_message(&pdu).unwrap(), message(1, ProtocolOp::UnbindRequest));
    }

    #[test]
    fn message_id_range() {
        let with_id = |id: &[u8]| {
            let mut pdu = vec![0x30, (id.len() + 4) as u8, 0x02, id.len() as u8];
            pdu.extend_from_slice(id);
            pdu.extend_from_slice(&[0x42, 0x00]);
            decode_message(&pdu).map(|m| m.message_id).map_err(|e| e.message_id)
        };
        assert_eq!(with_id(&[0x00]), Ok(0));
        assert_eq!(with_id(&[0x7f, 0xff, 0xff, 0xff]), Ok(MESSAGE_ID_MAX));
        assert_eq!(with_id(&[0x00, 0x00, 0x00, 0x00, 0x00, 0x05]), Ok(5));
        assert_eq!(with_id(&[0x00, 0x80, 0x00, 0x00, 0x00]), Err(None));
        assert_eq!(with_id(&[0xff]), Err(None));
        assert_eq!(with_id(&[]), Err(None));
        assert!(decode_message(&[0x30, 0x05, 0x04, 0x01, 0x01, 0x42, 0x00]).is_err());
        assert!(decode_message(&[0x31, 0x05, 0x02, 0x01, 0x01, 0x42, 0x00]).is_err());
        assert!(decode_message(&[0x30, 0x05, 0x02, 0x01, 0x01, 0x42, 0x00, 0x00]).is_err());
    }

    #[test]
    fn long_form_lengths_accepted() {
        let pdu = [
            0x30, 0x84, 0, 0, 0, 0x14, 0x02, 0x84, 0, 0, 0, 0x01, 0x01, 0x60, 0x84, 0, 0, 0, 0x07, 0x02,
            0x01, 0x03, 0x04, 0x00, 0x80, 0x00,
        ];
        assert_eq!(check_frame(&pdu, &FrameLimits::default()), Ok(Some(pdu.len())));
        assert_eq!(decode_message(&pdu).unwrap().message_id, 1);
        let big = message(1, ProtocolOp::DelRequest(OctetString::from(vec![b'x'; 70_000])));
        let encoded = encode_message(&big).unwrap();
        assert_eq!(&encoded[..2], [0x30, 0x83]);
        round_trip(&big);
    }

    #[test]
    fn encoding_errors_and_appending() {
        let too_big = message(MESSAGE_ID_MAX + 1, ProtocolOp::UnbindRequest);
        assert!(encode_message(&too_big).is_err());
        let mut out = vec![0xaa];
        assert!(encode_message_into(&too_big, &mut out).is_err());
        assert_eq!(out, [0xaa]);
        encode_message_into(&message(0x80, ProtocolOp::UnbindRequest), &mut out).unwrap();
        assert_eq!(out, [0xaa, 0x30, 0x06, 0x02, 0x02, 0x00, 0x80, 0x42, 0x00]);
    }

    /// `rasn` recurses once per nested filter. check_frame bounds that nesting, and the
    /// deepest PDU the default limits let through must decode on a small worker stack
    /// (measured: under 256 KiB in a debug build).
    #[test]
    fn deepest_allowed_filter_decodes_on_a_small_stack() {
        // LDAPMessage, SearchRequest, 61 × NOT, the equality match: 64 constructed levels.
        let depth = FrameLimits::default().nesting_depth_max - 3;
        let filter = parse_filter(&format!("{}(cn=x){}", "(!".repeat(depth), ")".repeat(depth))).unwrap();
        let search = message(
            1,
            ProtocolOp::SearchRequest(SearchRequest {
                base_object: os(""),
                scope: SearchScope::BaseObject,
                deref_aliases: DerefAliases::NeverDerefAliases,
                size_limit: 0,
                time_limit: 0,
                types_only: false,
                filter,
                attributes: vec![],
            }),
        );
        let encoded = encode_message(&search).unwrap();
        assert_eq!(check_frame(&encoded, &FrameLimits::default()), Ok(Some(encoded.len())));
        let mut one_deeper = parse_filter("(!(cn=x))").unwrap();
        if let ProtocolOp::SearchRequest(request) = &search.protocol_op {
            one_deeper = Filter::Not(Box::new(request.filter.clone()));
        }
        let deeper = message(
            1,
            ProtocolOp::SearchRequest(SearchRequest {
                base_object: os(""),
                scope: SearchScope::BaseObject,
                deref_aliases: DerefAliases::NeverDerefAliases,
                size_limit: 0,
                time_limit: 0,
                types_only: false,
                filter: one_deeper,
                attributes: vec![],
            }),
        );
        let too_deep = encode_message(&deeper).unwrap();
        assert!(check_frame(&too_deep, &FrameLimits::default()).is_err());
        let worker = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || decode_message(&encoded).map(|decoded| decoded == search))
            .unwrap();
        assert_eq!(worker.join().unwrap(), Ok(true));
    }

    /// Runs bytes through the same path the server uses; any panic fails the test.
    fn frame_then_decode(mut bytes: &[u8]) {
        let limits = FrameLimits::default();
        while let Ok(Some(len)) = check_frame(bytes, &limits) {
            let _ = decode_message(&bytes[..len]);
            bytes = &bytes[len..];
        }
        let _ = decode_message(bytes);
    }

    #[test]
    fn garbage_never_panics() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 48) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Some(first) = bytes.first_mut() {
                *first = 0x30;
            }
            if bytes.len() > 1 {
                bytes[1] = (len - 2) as u8;
            }
            frame_then_decode(&bytes);
        }
        for protocol_op in every_protocol_op() {
            let encoded = encode_message(&message(1, protocol_op)).unwrap();
            for cut in 0..encoded.len() {
                frame_then_decode(&encoded[..cut]);
            }
            for index in 0..encoded.len() {
                for bit in 0..8 {
                    let mut flipped = encoded.clone();
                    flipped[index] ^= 1 << bit;
                    frame_then_decode(&flipped);
                }
            }
        }
    }

    /// PROTOS c06-ldapv3: 100 malformed PDUs that must be refused, never crash us.
    #[test]
    fn protos_c06_ldapv3_corpus() {
        let relative = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/conformance/protos-c06-ldapv3");
        let directory =
            [relative.as_path(), std::path::Path::new("/work/shared/testdata/conformance/protos-c06-ldapv3")]
                .into_iter()
                .find(|path| path.is_dir())
                .expect("the PROTOS c06-ldapv3 test data (shared/testdata/conformance/) is missing");
        let mut count = 0;
        for entry in std::fs::read_dir(directory).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            frame_then_decode(&bytes);
            count += 1;
        }
        assert_eq!(count, 100);
    }
}
