//! The hand-written BER writers of a SearchResultEntry: definite lengths, TLVs, one
//! PartialAttribute, and the whole LDAPMessage around already-encoded attribute segments.
//! The rasn types in `proto::message` stay the reference (the tests in `segments` compare).

/// Appends a BER definite length (X.690 §8.1.3).
pub fn put_length(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
        return;
    }
    let bytes = len.to_be_bytes();
    let significant = bytes.iter().skip_while(|b| **b == 0);
    out.push(0x80 | significant.clone().count() as u8);
    out.extend(significant);
}

fn length_of_length(len: usize) -> usize {
    if len < 0x80 {
        1
    } else {
        1 + (usize::BITS as usize / 8 - len.leading_zeros() as usize / 8)
    }
}

/// Appends tag, length and `content`.
pub fn put_tlv(out: &mut Vec<u8>, tag: u8, content: &[u8]) {
    out.push(tag);
    put_length(out, content.len());
    out.extend_from_slice(content);
}

/// [`partial_attribute`] appended to `out`, with no buffer of its own: the lengths are
/// worked out first.
pub fn put_partial_attribute<V: AsRef<[u8]>>(out: &mut Vec<u8>, description: &[u8], values: &[V]) {
    let vals_len: usize =
        values.iter().map(|v| 1 + length_of_length(v.as_ref().len()) + v.as_ref().len()).sum();
    let content_len = 1
        + length_of_length(description.len())
        + description.len()
        + 1
        + length_of_length(vals_len)
        + vals_len;
    out.reserve(1 + length_of_length(content_len) + content_len);
    out.push(0x30);
    put_length(out, content_len);
    put_tlv(out, 0x04, description);
    out.push(0x31);
    put_length(out, vals_len);
    for value in values {
        put_tlv(out, 0x04, value.as_ref());
    }
}

/// `PartialAttribute ::= SEQUENCE { type AttributeDescription, vals SET OF value }`, values
/// in their stored order.
pub fn partial_attribute(description: &[u8], values: &[&[u8]]) -> Vec<u8> {
    let mut vals = Vec::with_capacity(values.iter().map(|v| v.len() + 4).sum());
    for value in values {
        put_tlv(&mut vals, 0x04, value);
    }
    let mut content = Vec::with_capacity(description.len() + vals.len() + 8);
    put_tlv(&mut content, 0x04, description);
    put_tlv(&mut content, 0x31, &vals);
    let mut out = Vec::with_capacity(content.len() + 4);
    put_tlv(&mut out, 0x30, &content);
    out
}

/// A whole `LDAPMessage { messageID, [APPLICATION 4] SearchResultEntry { dn, attributes } }`
/// around already-encoded attribute segments.
pub fn search_result_entry(message_id: u32, dn: &[u8], attributes: &[u8]) -> Vec<u8> {
    let id = message_id.to_be_bytes();
    // INTEGER content: minimal two's complement, so a leading 0 byte when the top bit is set.
    let skip = id.iter().take_while(|b| **b == 0).count().min(3);
    let significant = id.split_at_checked(skip).map_or(id.as_slice(), |(_, rest)| rest);
    let needs_pad = significant.first().is_some_and(|b| b & 0x80 != 0);
    let id_len = significant.len() + usize::from(needs_pad);
    let dn_tlv = 1 + length_of_length(dn.len()) + dn.len();
    let attrs_tlv = 1 + length_of_length(attributes.len()) + attributes.len();
    let op_content = dn_tlv + attrs_tlv;
    let op_tlv = 1 + length_of_length(op_content) + op_content;
    let msg_content = 2 + id_len + op_tlv;
    let mut out = Vec::with_capacity(1 + length_of_length(msg_content) + msg_content);
    out.push(0x30);
    put_length(&mut out, msg_content);
    out.push(0x02);
    out.push(id_len as u8);
    if needs_pad {
        out.push(0);
    }
    out.extend_from_slice(significant);
    out.push(0x64);
    put_length(&mut out, op_content);
    put_tlv(&mut out, 0x04, dn);
    out.push(0x30);
    put_length(&mut out, attributes.len());
    out.extend_from_slice(attributes);
    out
}
