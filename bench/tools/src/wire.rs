//! The BER the tools need on their hot path, by hand: reading a whole message's ID and
//! operation tag without decoding the operation, and writing a message around operation
//! bytes that were encoded once. Everything else goes through `ferrodir_proto`.
//!
//! Every function here takes a PDU that [`ferrodir_proto::frame::check_frame`] has already
//! accepted whole, so lengths are known to fit; the checks below only keep a bug from
//! turning into a panic.

use crate::error::Error;

/// The identifier octets of the RFC 4511 protocolOp CHOICE (APPLICATION class; constructed
/// except for UnbindRequest, DelRequest and AbandonRequest).
pub mod tag {
    pub const BIND_REQUEST: u8 = 0x60;
    pub const BIND_RESPONSE: u8 = 0x61;
    pub const UNBIND_REQUEST: u8 = 0x42;
    pub const SEARCH_REQUEST: u8 = 0x63;
    pub const SEARCH_RESULT_ENTRY: u8 = 0x64;
    pub const SEARCH_RESULT_DONE: u8 = 0x65;
    pub const MODIFY_REQUEST: u8 = 0x66;
    pub const MODIFY_RESPONSE: u8 = 0x67;
    pub const ADD_REQUEST: u8 = 0x68;
    pub const ADD_RESPONSE: u8 = 0x69;
    pub const DEL_REQUEST: u8 = 0x4a;
    pub const DEL_RESPONSE: u8 = 0x6b;
    pub const MODIFY_DN_REQUEST: u8 = 0x6c;
    pub const MODIFY_DN_RESPONSE: u8 = 0x6d;
    pub const COMPARE_REQUEST: u8 = 0x6e;
    pub const COMPARE_RESPONSE: u8 = 0x6f;
    pub const ABANDON_REQUEST: u8 = 0x50;
    pub const SEARCH_RESULT_REFERENCE: u8 = 0x73;
    pub const EXTENDED_REQUEST: u8 = 0x77;
    pub const EXTENDED_RESPONSE: u8 = 0x78;
    pub const INTERMEDIATE_RESPONSE: u8 = 0x79;
    /// Universal OCTET STRING, primitive.
    pub const OCTET_STRING: u8 = 0x04;
    /// Universal ENUMERATED.
    pub const ENUMERATED: u8 = 0x0a;
}

/// One LDAPMessage seen from outside: its ID, and its protocolOp still encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peeked<'a> {
    pub message_id: u32,
    /// The protocolOp's identifier octet (see [`tag`]).
    pub op_tag: u8,
    /// The protocolOp's contents octets.
    pub op_content: &'a [u8],
}

/// One TLV: its identifier octet, its contents, and the bytes after it.
fn split_tlv(bytes: &[u8]) -> Result<(u8, &[u8], &[u8]), Error> {
    let (&identifier, after_identifier) = bytes.split_first().ok_or(Error::Malformed("missing element"))?;
    if identifier & 0x1f == 0x1f {
        // No LDAP element uses a high tag number (X.690 §8.1.2.4).
        return Err(Error::Malformed("high tag number"));
    }
    let (&first, after_first) = after_identifier.split_first().ok_or(Error::Malformed("missing length"))?;
    let (content_len, after_length) = if first < 0x80 {
        (usize::from(first), after_first)
    } else {
        let count = usize::from(first & 0x7f);
        // check_frame refused indefinite lengths; 8 octets is its limit too.
        if count == 0 || count > 8 || after_first.len() < count {
            return Err(Error::Malformed("bad length octets"));
        }
        let length = after_first[..count].iter().fold(0u64, |len, &octet| (len << 8) | u64::from(octet));
        (usize::try_from(length).unwrap_or(usize::MAX), &after_first[count..])
    };
    if content_len > after_length.len() {
        return Err(Error::Malformed("element overruns the message"));
    }
    let (content, rest) = after_length.split_at(content_len);
    Ok((identifier, content, rest))
}

/// The contents octets of the TLV at the start of `bytes`.
pub fn tlv_content(bytes: &[u8]) -> Result<&[u8], Error> {
    split_tlv(bytes).map(|(_, content, _)| content)
}

/// Reads the messageID and the protocolOp's tag of one whole LDAPMessage (RFC 4511 §4.1.1)
/// without decoding the operation. Controls after the operation are ignored.
pub fn peek(pdu: &[u8]) -> Result<Peeked<'_>, Error> {
    let (identifier, message, _) = split_tlv(pdu)?;
    if identifier != 0x30 {
        return Err(Error::Malformed("LDAPMessage is not a SEQUENCE"));
    }
    let (identifier, id_octets, after_id) = split_tlv(message)?;
    if identifier != 0x02 || id_octets.is_empty() || id_octets.len() > 5 || id_octets[0] & 0x80 != 0 {
        return Err(Error::Malformed("messageID is not a non-negative INTEGER"));
    }
    let message_id = id_octets.iter().fold(0u64, |id, &octet| (id << 8) | u64::from(octet));
    let message_id = u32::try_from(message_id).map_err(|_| Error::Malformed("messageID above maxInt"))?;
    let (op_tag, op_content, _controls) = split_tlv(after_id)?;
    Ok(Peeked { message_id, op_tag, op_content })
}

/// The resultCode of an operation whose contents start with `COMPONENTS OF LDAPResult`
/// (every response but SearchResultEntry, SearchResultReference and IntermediateResponse).
pub fn result_code(op_content: &[u8]) -> Result<u32, Error> {
    let (identifier, octets, _) = split_tlv(op_content)?;
    if identifier != tag::ENUMERATED || octets.is_empty() || octets.len() > 5 || octets[0] & 0x80 != 0 {
        return Err(Error::Malformed("resultCode is not a non-negative ENUMERATED"));
    }
    let code = octets.iter().fold(0u64, |code, &octet| (code << 8) | u64::from(octet));
    u32::try_from(code).map_err(|_| Error::Malformed("resultCode too large"))
}

/// The first element of an operation's contents when it is a primitive OCTET STRING: the
/// base object of a SearchRequest, the name of a BindRequest (RFC 4511 §4.5.1, §4.2).
pub fn first_octet_string(op_content: &[u8]) -> Result<&[u8], Error> {
    let (identifier, octets, _) = split_tlv(op_content)?;
    if identifier != tag::OCTET_STRING {
        return Err(Error::Malformed("expected a primitive OCTET STRING"));
    }
    Ok(octets)
}

/// How many octets the definite length of `content_len` takes (X.690 §8.1.3, minimal).
pub fn length_octets(content_len: usize) -> usize {
    if content_len < 0x80 {
        1
    } else {
        1 + (usize::BITS - content_len.leading_zeros()).div_ceil(8) as usize
    }
}

/// The whole size of a TLV with a one-octet identifier and `content_len` contents octets.
pub fn tlv_len(content_len: usize) -> usize {
    1 + length_octets(content_len) + content_len
}

/// Appends the minimal definite length of `len` (X.690 §8.1.3).
pub fn push_length(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
        return;
    }
    let bytes = len.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count();
    out.push(0x80 | (bytes.len() - skip) as u8);
    out.extend_from_slice(&bytes[skip..]);
}

/// Appends one TLV with a one-octet identifier.
pub fn push_tlv(out: &mut Vec<u8>, identifier: u8, content: &[u8]) {
    out.push(identifier);
    push_length(out, content.len());
    out.extend_from_slice(content);
}

/// The minimal two's-complement content octets of a messageID (X.690 §8.3.2): at most 5.
fn message_id_octets(message_id: u32) -> ([u8; 5], usize) {
    let bytes = message_id.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count().min(3);
    let mut octets = [0u8; 5];
    let mut len = 0;
    if bytes[skip] & 0x80 != 0 {
        len = 1; // a leading zero keeps the INTEGER positive
    }
    for &b in &bytes[skip..] {
        octets[len] = b;
        len += 1;
    }
    (octets, len)
}

/// Appends the LDAPMessage SEQUENCE header and the messageID for a protocolOp of
/// `op_total_len` bytes (identifier, length and contents), which the caller appends next.
pub fn push_message_start(out: &mut Vec<u8>, message_id: u32, op_total_len: usize) {
    let (id_octets, id_len) = message_id_octets(message_id);
    out.push(0x30);
    push_length(out, 2 + id_len + op_total_len);
    out.push(0x02);
    out.push(id_len as u8);
    out.extend_from_slice(&id_octets[..id_len]);
}

/// Appends a whole LDAPMessage: `message_id` patched in front of a pre-encoded protocolOp.
pub fn push_message(out: &mut Vec<u8>, message_id: u32, encoded_op: &[u8]) {
    push_message_start(out, message_id, encoded_op.len());
    out.extend_from_slice(encoded_op);
}

/// The encoded protocolOp (identifier, length, contents) of a whole LDAPMessage: what
/// [`push_message`] needs, cut from a message encoded once by `ferrodir_proto`.
pub fn encoded_op(pdu: &[u8]) -> Result<&[u8], Error> {
    let (_, message, _) = split_tlv(pdu)?;
    let (_, _, after_id) = split_tlv(message)?;
    let (_, _, after_op) = split_tlv(after_id)?;
    Ok(&after_id[..after_id.len() - after_op.len()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::frame::{check_frame, FrameLimits};
    use ferrodir_proto::message::{
        decode_message, encode_message, LdapMessage, LdapResult, OctetString, ProtocolOp, MESSAGE_ID_MAX,
    };
    use ferrodir_proto::ResultCode;

    fn done(message_id: u32, code: ResultCode) -> Vec<u8> {
        let message = LdapMessage {
            message_id,
            protocol_op: ProtocolOp::SearchResultDone(LdapResult::error(code, "why")),
            controls: None,
        };
        encode_message(&message).unwrap()
    }

    #[test]
    fn peek_reads_id_tag_and_result_code() {
        for message_id in [0, 1, 127, 128, 255, 256, 65_535, 8_388_608, MESSAGE_ID_MAX] {
            let pdu = done(message_id, ResultCode::NO_SUCH_OBJECT);
            let peeked = peek(&pdu).unwrap();
            assert_eq!(peeked.message_id, message_id);
            assert_eq!(peeked.op_tag, tag::SEARCH_RESULT_DONE);
            assert_eq!(result_code(peeked.op_content).unwrap(), ResultCode::NO_SUCH_OBJECT.0);
        }
    }

    #[test]
    fn patched_message_equals_proto_encoding() {
        let template = done(0, ResultCode::SUCCESS);
        let op = encoded_op(&template).unwrap();
        for message_id in [0, 1, 127, 128, 255, 256, 65_535, 8_388_608, MESSAGE_ID_MAX] {
            let mut out = Vec::new();
            push_message(&mut out, message_id, op);
            assert_eq!(out, done(message_id, ResultCode::SUCCESS), "id {message_id}");
        }
    }

    #[test]
    fn long_lengths_frame_and_decode() {
        let value = vec![b'x'; 70_000];
        let mut op = Vec::new();
        op.push(tag::DEL_REQUEST);
        push_length(&mut op, value.len());
        op.extend_from_slice(&value);
        assert_eq!(op.len(), tlv_len(value.len()));
        let mut pdu = Vec::new();
        push_message(&mut pdu, 300, &op);
        assert_eq!(check_frame(&pdu, &FrameLimits::default()).unwrap(), Some(pdu.len()));
        let decoded = decode_message(&pdu).unwrap();
        assert_eq!(decoded.protocol_op, ProtocolOp::DelRequest(OctetString::from(value)));
        assert_eq!(decoded.message_id, 300);
    }

    #[test]
    fn length_octets_match_push_length() {
        for len in [0, 1, 127, 128, 255, 256, 65_535, 65_536, 16_777_216] {
            let mut out = Vec::new();
            push_length(&mut out, len);
            assert_eq!(out.len(), length_octets(len), "len {len}");
        }
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let pdu = done(7, ResultCode::SUCCESS);
        for end in 0..pdu.len() {
            assert!(peek(&pdu[..end]).is_err(), "prefix {end}");
        }
    }
}
