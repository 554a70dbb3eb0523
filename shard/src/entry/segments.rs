//! Pre-encoded attribute segments and the hand-written encoder of SearchResultEntry PDUs.
//!
//! Profiles of Apache DS put 29–40% of its read time into copying entries on the way out.
//! Here, each cached entry keeps its attributes already BER-encoded, one segment per
//! attribute (`compactentry`). Sending an entry copies the selected
//! segments into one buffer and puts the messageID, the DN and the lengths around them: the
//! parts that change per request or after a rename. The rasn types in `proto::message` stay
//! the reference; a test checks that both encoders produce the same bytes.

use std::borrow::Cow;
use std::sync::Arc;

use crate::entry::codec::CorruptRecord;
use crate::entry::compactentry::CompactEntry;
use crate::entry::record::EntryRecord;
use crate::id::EntryId;

/// An entry as a read found it: from the entry cache, compact (sent from its encoded
/// attributes, decoded on demand for filters), or read from a snapshot for this one send.
#[derive(Debug, Clone)]
pub enum Cached {
    Kept(Arc<CompactEntry>),
    /// Encoded straight from its attributes: building a compact form to send it once
    /// would cost more than it saves.
    Transient(Arc<EntryRecord>),
}

impl Cached {
    pub fn is_kept(&self) -> bool {
        matches!(self, Cached::Kept(_))
    }

    pub fn parent(&self) -> EntryId {
        match self {
            Cached::Kept(c) => c.parent,
            Cached::Transient(r) => r.parent,
        }
    }

    pub fn rdn(&self) -> &str {
        match self {
            Cached::Kept(c) => c.rdn(),
            Cached::Transient(r) => &r.rdn,
        }
    }

    /// The record with at least the attributes `wanted` names (None: all): what judging
    /// the entry against a filter needs.
    pub fn for_filter(
        &self,
        wanted: Option<&crate::entry::compactentry::Wanted>,
    ) -> Result<Cow<'_, EntryRecord>, CorruptRecord> {
        match self {
            Cached::Kept(c) => Ok(Cow::Owned(c.decode_selected(wanted)?)),
            Cached::Transient(r) => Ok(Cow::Borrowed(r.as_ref())),
        }
    }

    /// The whole record.
    pub fn record(&self) -> Result<Arc<EntryRecord>, CorruptRecord> {
        match self {
            Cached::Kept(c) => Ok(Arc::new(c.decode()?)),
            Cached::Transient(r) => Ok(r.clone()),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::message::{
        encode_message, LdapMessage, OctetString, PartialAttribute, ProtocolOp, SearchResultEntry,
    };

    fn reference(message_id: u32, dn: &str, attrs: &[(&str, &[&str])]) -> Vec<u8> {
        let attributes = attrs
            .iter()
            .map(|(name, values)| PartialAttribute {
                r#type: OctetString::from(name.as_bytes()),
                vals: values.iter().map(|v| OctetString::from(v.as_bytes())).collect(),
            })
            .collect();
        let entry = SearchResultEntry { object_name: OctetString::from(dn.as_bytes()), attributes };
        let message =
            LdapMessage { message_id, protocol_op: ProtocolOp::SearchResultEntry(entry), controls: None };
        encode_message(&message).unwrap()
    }

    fn ours(message_id: u32, dn: &str, attrs: &[(&str, &[&str])]) -> Vec<u8> {
        let mut encoded = Vec::new();
        for (name, values) in attrs {
            let values: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
            encoded.extend(partial_attribute(name.as_bytes(), &values));
        }
        search_result_entry(message_id, dn.as_bytes(), &encoded)
    }

    #[test]
    fn the_direct_encoder_writes_what_the_segment_encoder_writes() {
        let long = "y".repeat(70_000);
        let cases: [(&str, Vec<&str>); 4] = [
            ("cn", vec![]),
            ("cn", vec!["a", "b"]),
            ("description", vec![long.as_str()]),
            ("x", vec![""; 300]),
        ];
        for (name, values) in cases {
            let bytes: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
            let mut direct = vec![0xAA];
            put_partial_attribute(&mut direct, name.as_bytes(), &bytes);
            assert_eq!(
                direct[1..],
                partial_attribute(name.as_bytes(), &bytes)[..],
                "{name}: {}",
                values.len()
            );
        }
    }

    #[test]
    fn matches_the_rasn_reference_encoder() {
        let long = "x".repeat(300);
        let big: Vec<String> = (0..200).map(|i| format!("value number {i}")).collect();
        let big_refs: Vec<&str> = big.iter().map(String::as_str).collect();
        let long_values = [long.as_str()];
        for id in [0u32, 1, 127, 128, 255, 256, 65_535, 8_388_608, 2_147_483_647] {
            type Case<'a> = (&'a str, Vec<(&'a str, &'a [&'a str])>);
            let cases: Vec<Case> = vec![
                ("", vec![]),
                ("cn=a,dc=example,dc=com", vec![("cn", &["a", "b"]), ("objectClass", &[])]),
                (long.as_str(), vec![("description", &long_values), ("member", &big_refs)]),
            ];
            for (dn, attrs) in cases {
                assert_eq!(ours(id, dn, &attrs), reference(id, dn, &attrs), "id {id}, dn {}", dn.len());
            }
        }
    }
}
