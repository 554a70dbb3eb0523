//! The stored form of an entry.
//!
//! An entry stores its own RDN and its parent's id, not its full DN: the DN is put together
//! at send time from the tree skeleton, so renaming or moving a subtree rewrites only the
//! records of the entries that actually moved.

use ferrodir_proto::entry::{Attribute, Entry};

use crate::entry::codec::{put_bytes, put_u64, put_varint, ByteReader, CorruptRecord};
use crate::id::EntryId;

/// Version 2 ends with a CRC-32 of everything before it. redb checks page checksums only
/// when it verifies a file (at start, docs/DECISIONS.md), not on reads, so a record damaged
/// on disk after the start would otherwise be served as it reads. Version 1 records (no
/// checksum) still decode; every write stores version 2.
const RECORD_VERSION: u8 = 2;
const RECORD_VERSION_UNCHECKED: u8 = 1;
const CHECKSUM_BYTES: usize = 4;

/// Flag bit: the entry has (or recently had) children and is published in the skeleton.
pub const FLAG_CONTAINER: u8 = 1;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryRecord {
    pub parent: EntryId,
    /// The RDN as the client wrote it (RFC 4514 string form).
    pub rdn: String,
    /// The normalised RDN; the key of this entry's DN→ID record under `parent`.
    pub rdn_norm: String,
    pub flags: u8,
    pub entry: Entry,
}

impl EntryRecord {
    pub fn is_container(&self) -> bool {
        self.flags & FLAG_CONTAINER != 0
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.encode_body(RECORD_VERSION);
        let checksum = crc32fast::hash(&out);
        out.extend_from_slice(&checksum.to_be_bytes());
        out
    }

    fn encode_body(&self, version: u8) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.push(version);
        put_u64(&mut out, self.parent.0);
        out.push(self.flags);
        put_bytes(&mut out, self.rdn.as_bytes());
        put_bytes(&mut out, self.rdn_norm.as_bytes());
        put_varint(&mut out, self.entry.attrs.len() as u64);
        for attr in &self.entry.attrs {
            put_bytes(&mut out, attr.name.as_bytes());
            put_varint(&mut out, attr.values.len() as u64);
            for value in &attr.values {
                put_bytes(&mut out, value);
            }
        }
        out
    }

    /// Decodes a stored record; a damaged one (checksum, lengths) is an error, never a
    /// different entry.
    pub fn decode(bytes: &[u8]) -> Result<Self, CorruptRecord> {
        Self::decode_selected(bytes, &|_| true)
    }

    /// Like [`EntryRecord::decode`], keeping only the attributes whose stored name `keep`
    /// accepts: a scan evaluating a filter on a few types decodes just those (the rest are
    /// skipped, not copied), and decodes the whole entry only for a match.
    pub fn decode_selected(bytes: &[u8], keep: &dyn Fn(&[u8]) -> bool) -> Result<Self, CorruptRecord> {
        match bytes.first() {
            Some(&RECORD_VERSION) => {
                let split =
                    bytes.len().checked_sub(CHECKSUM_BYTES).ok_or(CorruptRecord("truncated record"))?;
                let (body, stored) = bytes.split_at(split);
                if crc32fast::hash(body).to_be_bytes() != stored {
                    return Err(CorruptRecord("checksum mismatch: damaged on disk; run `ferrodir verify`"));
                }
                Self::decode_body(body, keep)
            }
            Some(&RECORD_VERSION_UNCHECKED) => Self::decode_body(bytes, keep),
            _ => Err(CorruptRecord("unknown record version")),
        }
    }

    /// Calls `visit` with each stored attribute name (as stored, options included) without
    /// decoding the entry, until it returns true; Ok(true) if it did. A scan uses it to
    /// skip entries that lack every attribute its filter needs (`prefilter`). The checksum
    /// is not checked here: whatever passes goes through [`EntryRecord::decode`], which
    /// checks it, and a damaged record that is skipped was no match to begin with.
    pub fn any_attribute_name(
        bytes: &[u8],
        visit: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<bool, CorruptRecord> {
        let body = match bytes.first() {
            Some(&RECORD_VERSION) => {
                let split =
                    bytes.len().checked_sub(CHECKSUM_BYTES).ok_or(CorruptRecord("truncated record"))?;
                bytes.split_at(split).0
            }
            Some(&RECORD_VERSION_UNCHECKED) => bytes,
            _ => return Err(CorruptRecord("unknown record version")),
        };
        let mut r = ByteReader::new(body);
        r.u8()?;
        r.u64()?;
        r.u8()?;
        r.bytes()?;
        r.bytes()?;
        let attr_count = r.varint()?;
        for _ in 0..attr_count {
            if visit(r.bytes()?) {
                return Ok(true);
            }
            for _ in 0..r.varint()? {
                r.bytes()?;
            }
        }
        Ok(false)
    }

    /// The fields after the version byte, which the caller has checked.
    fn decode_body(bytes: &[u8], keep: &dyn Fn(&[u8]) -> bool) -> Result<Self, CorruptRecord> {
        let mut r = ByteReader::new(bytes);
        r.u8()?;
        let parent = EntryId(r.u64()?);
        let flags = r.u8()?;
        let rdn = r.string()?;
        let rdn_norm = r.string()?;
        let attr_count = r.varint()?;
        let mut attrs = Vec::with_capacity(attr_count.min(256) as usize);
        for _ in 0..attr_count {
            let name = r.bytes()?;
            let value_count = r.varint()?;
            if !keep(name) {
                for _ in 0..value_count {
                    r.bytes()?;
                }
                continue;
            }
            let name = std::str::from_utf8(name).map_err(|_| CorruptRecord("utf-8"))?;
            let mut values = Vec::with_capacity(value_count.min(256) as usize);
            for _ in 0..value_count {
                values.push(r.bytes()?.to_vec());
            }
            attrs.push(Attribute { name: name.to_string(), values });
        }
        if !r.is_empty() {
            return Err(CorruptRecord("trailing bytes"));
        }
        Ok(Self { parent, rdn, rdn_norm, flags, entry: Entry { attrs } })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip() {
        let record = EntryRecord {
            parent: EntryId(42),
            rdn: "cn=Babs".into(),
            rdn_norm: "cn=babs".into(),
            flags: FLAG_CONTAINER,
            entry: Entry::new(vec![Attribute::new("cn", vec![b"Babs".to_vec(), b"B".to_vec()])]),
        };
        let bytes = record.encode();
        assert_eq!(EntryRecord::decode(&bytes).unwrap(), record);
        for cut in 0..bytes.len() {
            assert!(EntryRecord::decode(&bytes[..cut]).is_err());
        }
        // Any changed byte, even inside a value where the lengths still parse, is caught.
        for at in 1..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x20;
            assert!(EntryRecord::decode(&damaged).is_err(), "a change at byte {at} went unnoticed");
        }
        // Records stored before the checksum still read.
        let unchecked = record.encode_body(RECORD_VERSION_UNCHECKED);
        assert_eq!(EntryRecord::decode(&unchecked).unwrap(), record);
    }
}
