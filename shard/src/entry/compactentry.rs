//! The compact form of a cached entry: what answers reads, each entry once, in one buffer.
//!
//! Sending is what reads do most, so the compact form keeps only the sending form (why not a
//! decoded entry beside an encoded one: docs/DECISIONS.md, "One cache budget"): the RDN,
//! the normalised RDN and every attribute as its PartialAttribute encoding (RFC 4511
//! §4.1.7), back to back in one boxed buffer, plus one small span per attribute (where it
//! starts, and which attribute type it is, as its slot in the [`RuleTable`]). A send
//! copies the selected spans as they are; a filter decodes only the attributes it names,
//! on demand ([`CompactEntry::decode_selected`]), as scans already do with stored records.

use ferrodir_proto::entry::{Attribute, Entry};

use crate::entry::ber;
use crate::entry::codec::CorruptRecord;
use crate::entry::record::EntryRecord;
use crate::id::EntryId;
use crate::rules::base_name_in;
use crate::rules::RuleTable;
use crate::write::stamp::STORED_OPERATIONAL;

/// A span's slot for a type the schema does not know: its canonical name and whether it
/// is operational are worked out from its description when it is sent.
const UNKNOWN_TYPE: u32 = u32::MAX;

fn slot_of(rules: &RuleTable, description: &str) -> u32 {
    rules.get(description).map_or(UNKNOWN_TYPE, |r| r.slot)
}

/// One attribute of a compact entry: where its PartialAttribute starts in the buffer (it
/// ends where the next one starts) and its type's slot in the rule table ([`crate::rules::AttrRules::slot`]).
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    slot: u32,
}

/// An entry as the cache keeps it. Immutable: a change to the entry makes a new one.
#[derive(Debug)]
pub struct CompactEntry {
    pub parent: EntryId,
    pub flags: u8,
    /// The RDN, the normalised RDN, then every attribute's PartialAttribute.
    buf: Box<[u8]>,
    rdn_end: u32,
    rdn_norm_end: u32,
    spans: Box<[Span]>,
}

/// One attribute as sent: its encoding and what attribute selection asks of it.
pub struct SentAttribute<'a> {
    pub canonical: std::borrow::Cow<'a, str>,
    pub description: &'a str,
    pub operational: bool,
    /// The whole PartialAttribute, values included.
    pub with_values: &'a [u8],
}

fn too_big() -> CorruptRecord {
    CorruptRecord("entry too large to cache")
}

impl CompactEntry {
    /// The compact form of `record`. Fails only for an entry over 4 GiB, which no request
    /// can create (PDUs are bounded far below).
    pub fn build(rules: &RuleTable, record: &EntryRecord) -> Result<Self, CorruptRecord> {
        let attrs = &record.entry.attrs;
        let size: usize = record.rdn.len()
            + record.rdn_norm.len()
            + attrs
                .iter()
                .map(|a| a.name.len() + 12 + a.values.iter().map(|v| v.len() + 5).sum::<usize>())
                .sum::<usize>();
        let mut buf = Vec::with_capacity(size);
        buf.extend_from_slice(record.rdn.as_bytes());
        let rdn_end = u32::try_from(buf.len()).map_err(|_| too_big())?;
        buf.extend_from_slice(record.rdn_norm.as_bytes());
        let rdn_norm_end = u32::try_from(buf.len()).map_err(|_| too_big())?;
        let mut spans = Vec::with_capacity(attrs.len());
        for attr in attrs {
            let start = u32::try_from(buf.len()).map_err(|_| too_big())?;
            ber::put_partial_attribute(&mut buf, attr.name.as_bytes(), attr.values.as_slice());
            spans.push(Span { start, slot: slot_of(rules, &attr.name) });
        }
        u32::try_from(buf.len()).map_err(|_| too_big())?;
        Ok(Self {
            parent: record.parent,
            flags: record.flags,
            buf: buf.into_boxed_slice(),
            rdn_end,
            rdn_norm_end,
            spans: spans.into_boxed_slice(),
        })
    }

    /// What this entry costs the cache's budget: its buffers and its own size (the map
    /// slot and allocator overhead are the cache's `SLOT_OVERHEAD`).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.buf.len() + std::mem::size_of_val(&*self.spans)
    }

    pub fn rdn(&self) -> &str {
        self.text(0, self.rdn_end)
    }

    pub fn rdn_norm(&self) -> &str {
        self.text(self.rdn_end, self.rdn_norm_end)
    }

    pub fn is_container(&self) -> bool {
        self.flags & crate::entry::record::FLAG_CONTAINER != 0
    }

    fn text(&self, from: u32, to: u32) -> &str {
        // Both came from `String`s and the bounds from their lengths.
        self.buf.get(from as usize..to as usize).and_then(|b| std::str::from_utf8(b).ok()).unwrap_or("")
    }

    /// The encoded PartialAttribute of the `i`-th attribute.
    #[inline]
    fn segment(&self, i: usize) -> Option<&[u8]> {
        let start = self.spans.get(i)?.start as usize;
        let end = self.spans.get(i + 1).map_or(self.buf.len(), |next| next.start as usize);
        self.buf.get(start..end)
    }

    /// Every attribute, with its encoding and what selecting it needs, in stored order.
    /// Inlined: it sits on every entry a search sends (`query::search::encode_entry`), in
    /// another codegen unit.
    #[inline]
    pub fn attributes<'a>(&'a self, rules: &'a RuleTable) -> impl Iterator<Item = SentAttribute<'a>> + 'a {
        (0..self.spans.len()).filter_map(move |i| {
            let with_values = self.segment(i)?;
            let parsed = parse_segment(with_values)?;
            let description = std::str::from_utf8(parsed.description).ok()?;
            let slot = self.spans.get(i)?.slot;
            let (canonical, operational) = match rules.by_slot(slot) {
                Some(r) => (std::borrow::Cow::Borrowed(r.canonical.as_str()), r.operational),
                None => {
                    let name = ferrodir_proto::entry::base_name_lower(description);
                    let operational = STORED_OPERATIONAL.contains(&name.as_str());
                    (std::borrow::Cow::Owned(name), operational)
                }
            };
            Some(SentAttribute { canonical, description, operational, with_values })
        })
    }

    /// The whole entry, decoded (a write's staging, a fetch by id, a sort's keys).
    pub fn decode(&self) -> Result<EntryRecord, CorruptRecord> {
        self.decode_selected(None)
    }

    /// The entry with only the attributes `wanted` names, or all of them for None: what
    /// evaluating a filter needs ([`crate::query::search::selected_names`]).
    pub fn decode_selected(&self, wanted: Option<&WantedAttrs>) -> Result<EntryRecord, CorruptRecord> {
        let mut attrs = Vec::new();
        for (i, span) in self.spans.iter().enumerate() {
            // A type the schema knows is judged by its slot, without parsing the segment.
            let known = span.slot != UNKNOWN_TYPE;
            if known && wanted.is_some_and(|w| !w.slots.contains(&span.slot)) {
                continue;
            }
            let segment = self.segment(i).ok_or(CorruptRecord("cached entry: span"))?;
            let parsed = parse_segment(segment).ok_or(CorruptRecord("cached entry: segment"))?;
            if !known && wanted.is_some_and(|w| !base_name_in(parsed.description, &w.names)) {
                continue;
            }
            let name = std::str::from_utf8(parsed.description).map_err(|_| CorruptRecord("utf-8"))?;
            let mut values = Vec::new();
            let mut rest = parsed.values;
            while !rest.is_empty() {
                let (value, after) = take_tlv(rest, 0x04).ok_or(CorruptRecord("cached entry: value"))?;
                values.push(value.to_vec());
                rest = after;
            }
            attrs.push(Attribute { name: name.to_string(), values });
        }
        Ok(EntryRecord {
            parent: self.parent,
            rdn: self.rdn().to_string(),
            rdn_norm: self.rdn_norm().to_string(),
            flags: self.flags,
            entry: Entry { attrs },
        })
    }
}

/// The attributes a filter needs, as [`CompactEntry::decode_selected`] looks for them: the
/// lowercased base names, and the rule-table slots of those the schema knows. A cached
/// entry's attribute of a known type is kept when its slot is listed (any spelling of the
/// type: the slot is the type's), one of an unknown type when its base name is; a known
/// type's name resolves to its slot, so no attribute the names select is left out.
#[derive(Debug, Clone)]
pub struct WantedAttrs {
    names: Vec<String>,
    slots: Vec<u32>,
}

impl WantedAttrs {
    pub fn new(rules: &RuleTable, names: Vec<String>) -> Self {
        let mut slots: Vec<u32> = names.iter().filter_map(|n| rules.get(n)).map(|r| r.slot).collect();
        slots.sort_unstable();
        slots.dedup();
        Self { names, slots }
    }
}

struct Parsed<'a> {
    description: &'a [u8],
    /// The content of the SET OF values: their TLVs back to back.
    values: &'a [u8],
}

/// The description and values of one PartialAttribute this module encoded.
fn parse_segment(segment: &[u8]) -> Option<Parsed<'_>> {
    let (content, _) = take_tlv(segment, 0x30)?;
    let (description, rest) = take_tlv(content, 0x04)?;
    let (values, _) = take_tlv(rest, 0x31)?;
    Some(Parsed { description, values })
}

/// Splits one definite-length TLV with tag `tag` off the front of `input`: its content and
/// what follows it.
fn take_tlv(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    if first != tag {
        return None;
    }
    let (&len0, mut rest) = rest.split_first()?;
    let len = if len0 < 0x80 {
        len0 as usize
    } else {
        let count = (len0 & 0x7f) as usize;
        if count == 0 || count > std::mem::size_of::<usize>() {
            return None;
        }
        let (bytes, after) = rest.split_at_checked(count)?;
        rest = after;
        bytes.iter().fold(0usize, |acc, &b| (acc << 8) | b as usize)
    };
    rest.split_at_checked(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrodir_proto::schema::Schema;

    fn record() -> EntryRecord {
        let long = vec![b'x'; 300];
        EntryRecord {
            parent: EntryId(7),
            rdn: "uid=Babs".into(),
            rdn_norm: "uid=babs".into(),
            flags: 0,
            entry: Entry::new(vec![
                Attribute::new("objectClass", vec![b"top".to_vec(), b"person".to_vec()]),
                Attribute::new("uid", vec![b"Babs".to_vec()]),
                Attribute::new("cn;lang-en", vec![b"Babs B".to_vec()]),
                Attribute::new("description", vec![long, Vec::new()]),
                Attribute::new("x-unknown", vec![b"1".to_vec()]),
                Attribute::new("entryCSN", vec![b"csn".to_vec()]),
            ]),
        }
    }

    #[test]
    fn round_trips_and_sends_the_same_bytes_as_the_encoder() {
        let schema = Schema::standard();
        let rules = RuleTable::from_schema(&schema);
        let record = record();
        let compact = CompactEntry::build(&rules, &record).unwrap();
        assert_eq!(compact.decode().unwrap(), record);
        assert_eq!((compact.rdn(), compact.rdn_norm(), compact.parent), ("uid=Babs", "uid=babs", EntryId(7)));
        let sent: Vec<_> = compact.attributes(&rules).collect();
        assert_eq!(sent.len(), record.entry.attrs.len());
        for (attr, out) in record.entry.attrs.iter().zip(&sent) {
            let values: Vec<&[u8]> = attr.values.iter().map(Vec::as_slice).collect();
            assert_eq!(out.with_values, ber::partial_attribute(attr.name.as_bytes(), &values).as_slice());
            assert_eq!(out.description, attr.name);
        }
        assert_eq!(sent[2].canonical, "cn");
        assert_eq!(sent[0].canonical, "objectclass");
        assert!(!sent[0].operational);
        assert_eq!(sent[4].canonical, "x-unknown");
        assert!(sent[5].operational, "entryCSN is operational");
    }

    #[test]
    fn decodes_only_the_selected_attributes() {
        let schema = Schema::standard();
        let rules = RuleTable::from_schema(&schema);
        let compact = CompactEntry::build(&rules, &record()).unwrap();
        let names = vec!["cn".to_string(), "objectclass".to_string()];
        let some = compact.decode_selected(Some(&WantedAttrs::new(&rules, names))).unwrap();
        let kept: Vec<_> = some.entry.attrs.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(kept, ["objectClass", "cn;lang-en"]);
        // Another spelling of a known type selects it; an unknown type is matched by name.
        let names = vec!["commonname".to_string(), "x-unknown".to_string()];
        let some = compact.decode_selected(Some(&WantedAttrs::new(&rules, names))).unwrap();
        let kept: Vec<_> = some.entry.attrs.iter().map(|a| a.name.to_ascii_lowercase()).collect();
        assert_eq!(kept, ["cn;lang-en", "x-unknown"]);
        let none = compact.decode_selected(Some(&WantedAttrs::new(&rules, vec!["x-other".into()]))).unwrap();
        assert!(none.entry.attrs.is_empty());
        assert_eq!(some.rdn, "uid=Babs");
        assert_eq!(compact.decode_selected(None).unwrap(), record());
    }

    #[test]
    fn costs_about_the_stored_record() {
        let schema = Schema::standard();
        let rules = RuleTable::from_schema(&schema);
        let record = record();
        let compact = CompactEntry::build(&rules, &record).unwrap();
        let encoded = record.encode().len();
        // The stored record's bytes, the struct, and at most 12 bytes per attribute (its
        // span, and BER's headers beside the record's varints).
        let attrs = record.entry.attrs.len();
        let bound = encoded + std::mem::size_of::<CompactEntry>() + 12 * attrs;
        assert!(compact.bytes() <= bound, "{} bytes, more than {bound}", compact.bytes());
    }
}
