//! Pre-encoded attribute segments: where a cached entry's bytes come from when it is sent.
//! The hand-written encoder of SearchResultEntry PDUs is [`super::ber`].
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
        wanted: Option<&crate::entry::compactentry::WantedAttrs>,
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

#[cfg(test)]
mod tests {
    use crate::entry::ber::*;
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
