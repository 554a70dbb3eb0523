//! The shard's part of the retro changelog (draft-good-ldap-changelog, as 389-ds's
//! retro-changelog plugin serves it under `cn=changelog`): one record per Add, Delete,
//! Modify and Modify DN a client made, for IdM tools that poll "what changed since N".
//!
//! Like the delete log (`deletelog`), a record is staged in the same batch as its change:
//! key `G ‖ changeNumber` (big-endian, so the log reads in order), so it is durable exactly
//! when the change is; a crash loses or keeps both, and a failed commit shows neither.
//!
//! **Numbering.** A record's changeNumber is its change's CSN clock tick (microseconds
//! since the epoch, `clock.rs`): one clock for the whole directory hands out ticks that
//! never repeat and only rise, across shards and restarts, so the number needs no counter
//! of its own that every core would write. The numbers rise but leave gaps (a tick is a
//! microsecond, and other writes take ticks too); a tool reads "changeNumber >= last + 1"
//! and never relies on last - first + 1 being the count. Since shards commit on their own,
//! the router shows only records at or below the committed watermark (`Hub::watermark`):
//! a record that commits later always has a number above every one already shown.
//!
//! **Bounds.** At most `max` records per shard (`[changelog] max_entries` shared out over
//! the shards, so the whole log holds at most about `max_entries`), and none older than
//! `max_age_s`: staging a record that makes one too many deletes the oldest in the same
//! batch, and the actor's timer (`ShardActor`) trims expired records of an idle shard. The
//! actor keeps the numbers of its records in memory (8 bytes each) so trimming needs no
//! read, and reloads them from the snapshot after a failed commit.

use std::collections::VecDeque;
use std::sync::Arc;

use ferrodir_proto::entry::Entry;
use ferrodir_proto::ldif::{write_value_line, LdifMod, ModOp};

use crate::error::{ShardError, ShardResult};
use crate::id::EntryId;
use crate::skeleton::SkeletonCell;
use crate::storage::{KvSnapshot, Mutation, Table};

/// What a shard's changelog is built with ([`crate::ShardActor::with_changelog`]).
#[derive(Clone, Default)]
pub struct ChangelogSettings {
    enabled: bool,
    /// Records kept per shard (at least 1).
    max: usize,
    /// Records older than this are trimmed (0: kept until the count bound trims them).
    max_age_s: u64,
    /// Names an entry's DN from its parent (entries store only their RDN and parent id).
    skeleton: Option<Arc<SkeletonCell>>,
}

impl ChangelogSettings {
    /// A changelog of at most `max` records on this shard, none older than `max_age_s`
    /// (0: no age bound), naming DNs from `skeleton`.
    pub fn new(max: usize, max_age_s: u64, skeleton: Option<Arc<SkeletonCell>>) -> Self {
        Self { enabled: true, max: max.max(1), max_age_s, skeleton }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn max_age_s(&self) -> u64 {
        self.max_age_s
    }

    /// The DN an entry under `parent` named `rdn` has now; just the RDN without a skeleton.
    pub fn dn_of(&self, parent: EntryId, rdn: &str) -> String {
        match &self.skeleton {
            Some(cell) => cell.load().dn_of_child(parent, rdn),
            None => rdn.to_string(),
        }
    }

    /// The DN of the container `id` (a Modify DN's newSuperior); None when unknown.
    pub fn dn_of_container(&self, id: EntryId) -> Option<String> {
        let cell = self.skeleton.as_ref()?;
        cell.load().get(id).map(|node| node.dn.to_string())
    }
}

/// The kind of change (the draft's changeType values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Add = 1,
    Delete = 2,
    Modify = 3,
    ModRdn = 4,
}

impl ChangeKind {
    /// The changeType value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Delete => "delete",
            Self::Modify => "modify",
            Self::ModRdn => "modrdn",
        }
    }

    fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::Add),
            2 => Some(Self::Delete),
            3 => Some(Self::Modify),
            4 => Some(Self::ModRdn),
            _ => None,
        }
    }
}

/// One change as the changelog records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeRecord {
    /// The changeNumber: the change's CSN clock tick.
    pub number: u64,
    pub kind: ChangeKind,
    pub target_dn: String,
    /// Who made the change (the bind DN; empty: anonymous or the server itself).
    pub author: String,
    /// The change as LDIF: an Add's attributes, a Modify's modifications; empty for others.
    pub changes: Vec<u8>,
    /// A Modify DN's new RDN, whether the old RDN's values went, and its new superior.
    pub new_rdn: String,
    pub delete_old_rdn: bool,
    pub new_superior: Option<String>,
}

const VERSION: u8 = 1;
const FLAG_DELETE_OLD_RDN: u8 = 1;
const FLAG_NEW_SUPERIOR: u8 = 2;

pub fn key(number: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(Table::Changelog as u8);
    key.extend_from_slice(&number.to_be_bytes());
    key
}

pub fn prefix() -> Vec<u8> {
    vec![Table::Changelog as u8]
}

fn put_text(out: &mut Vec<u8>, text: &[u8]) {
    out.extend_from_slice(&(text.len() as u32).to_be_bytes());
    out.extend_from_slice(text);
}

/// Reads one length-prefixed field at `*at`, moving past it.
fn take_text<'a>(value: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let len = value.get(*at..*at + 4).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_be_bytes)?;
    let start = *at + 4;
    let end = start.checked_add(len as usize)?;
    *at = end;
    value.get(start..end)
}

impl ChangeRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.target_dn.len() + self.changes.len() + self.author.len());
        let mut flags = 0;
        if self.delete_old_rdn {
            flags |= FLAG_DELETE_OLD_RDN;
        }
        if self.new_superior.is_some() {
            flags |= FLAG_NEW_SUPERIOR;
        }
        out.extend_from_slice(&[VERSION, self.kind as u8, flags]);
        put_text(&mut out, self.target_dn.as_bytes());
        put_text(&mut out, self.author.as_bytes());
        put_text(&mut out, &self.changes);
        put_text(&mut out, self.new_rdn.as_bytes());
        put_text(&mut out, self.new_superior.as_deref().unwrap_or_default().as_bytes());
        out
    }

    /// A stored record from its key and value.
    pub fn decode(key: &[u8], value: &[u8]) -> ShardResult<Self> {
        let bad = || ShardError::Corrupt(crate::entry::codec::CorruptRecord("changelog record"));
        if key.len() != 9 || key.first() != Some(&(Table::Changelog as u8)) {
            return Err(bad());
        }
        let number = key
            .get(1..9)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_be_bytes)
            .ok_or_else(bad)?;
        if value.first() != Some(&VERSION) {
            return Err(bad());
        }
        let kind = value.get(1).copied().and_then(ChangeKind::from_byte).ok_or_else(bad)?;
        let flags = value.get(2).copied().ok_or_else(bad)?;
        let mut at = 3;
        let mut text = || -> ShardResult<String> {
            let bytes = take_text(value, &mut at).ok_or_else(bad)?;
            String::from_utf8(bytes.to_vec()).map_err(|_| bad())
        };
        let target_dn = text()?;
        let author = text()?;
        let changes = take_text(value, &mut at).ok_or_else(bad)?.to_vec();
        let mut text = || -> ShardResult<String> {
            let bytes = take_text(value, &mut at).ok_or_else(bad)?;
            String::from_utf8(bytes.to_vec()).map_err(|_| bad())
        };
        let new_rdn = text()?;
        let superior = text()?;
        Ok(Self {
            number,
            kind,
            target_dn,
            author,
            changes,
            new_rdn,
            delete_old_rdn: flags & FLAG_DELETE_OLD_RDN != 0,
            new_superior: (flags & FLAG_NEW_SUPERIOR != 0).then_some(superior),
        })
    }
}

/// An Add's `changes`: every attribute of the entry as stored (its password values as
/// hashed, its operational stamps too, as 389-ds records them), one LDIF line per value.
pub fn added_ldif(entry: &Entry) -> Vec<u8> {
    let mut out = Vec::new();
    for attr in &entry.attrs {
        for value in &attr.values {
            // Writing to a Vec cannot fail.
            let _ = write_value_line(&mut out, &attr.name, value);
        }
    }
    unfolded(out)
}

/// `ldif` with its folded lines joined again: a tool reading `changes` line by line (as
/// 389-ds writes it, unfolded) sees one line per value. Every "\n " is a fold: a value
/// that could hold a newline or start with a space was written in base64.
fn unfolded(ldif: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(ldif.len());
    let mut bytes = ldif.into_iter().peekable();
    while let Some(byte) = bytes.next() {
        if byte == b'\n' && bytes.peek() == Some(&b' ') {
            bytes.next();
            continue;
        }
        out.push(byte);
    }
    out
}

/// A Modify's `changes`: the modifications in LDIF's change form (`replace: sn`, the
/// values, `-`), with values as stored (a userPassword as hashed by the router).
pub fn modified_ldif(changes: &[LdifMod]) -> Vec<u8> {
    let mut out = Vec::new();
    for change in changes {
        let op = match change.op {
            ModOp::Add => "add",
            ModOp::Delete => "delete",
            ModOp::Replace => "replace",
            ModOp::Increment => "increment",
        };
        let _ = write_value_line(&mut out, op, change.attr.name.as_bytes());
        for value in &change.attr.values {
            let _ = write_value_line(&mut out, &change.attr.name, value);
        }
        out.extend_from_slice(b"-\n");
    }
    unfolded(out)
}

/// The records of `snapshot`'s changelog numbered above `after` and at most `upto`, in
/// order, at most `max` of them.
pub fn read(snapshot: &dyn KvSnapshot, after: u64, upto: u64, max: usize) -> ShardResult<Vec<ChangeRecord>> {
    let mut records = Vec::new();
    let mut failure = None;
    if after >= upto || max == 0 {
        return Ok(records);
    }
    let from = key(after.saturating_add(1));
    snapshot.scan_from(&prefix(), &from, &mut |k, v| match ChangeRecord::decode(k, v) {
        Ok(record) if record.number <= upto => {
            records.push(record);
            records.len() < max
        }
        Ok(_) => false,
        Err(e) => {
            failure = Some(e);
            false
        }
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(records),
    }
}

/// The actor's picture of its changelog: the numbers it holds, oldest first.
#[derive(Debug, Default)]
pub struct Changelog {
    numbers: VecDeque<u64>,
    /// The highest number committed (what the hub publishes as this shard's last).
    committed_last: u64,
}

impl Changelog {
    /// Reads the numbers of the shard's committed records.
    pub fn load(snapshot: &dyn KvSnapshot) -> ShardResult<Self> {
        let numbers = crate::index::keys::numbers_under(snapshot, &prefix())?;
        let committed_last = numbers.back().copied().unwrap_or(0);
        Ok(Self { numbers, committed_last })
    }

    pub fn len(&self) -> usize {
        self.numbers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.numbers.is_empty()
    }

    /// The oldest record kept (staged trims included; 0: none).
    pub fn first(&self) -> u64 {
        self.numbers.front().copied().unwrap_or(0)
    }

    pub fn committed_last(&self) -> u64 {
        self.committed_last
    }

    /// A batch holding records up to `last` committed.
    pub fn committed(&mut self, last: u64) {
        self.committed_last = self.committed_last.max(last);
    }

    /// The mutations that store `record` within `settings`' bounds at time `now_micros`:
    /// its put, and the deletes of the oldest records past the count or the age bound.
    pub fn record(
        &mut self,
        record: &ChangeRecord,
        settings: &ChangelogSettings,
        now_micros: u64,
        out: &mut Vec<Mutation>,
    ) {
        out.push(Mutation { key: key(record.number), value: Some(record.encode()) });
        self.numbers.push_back(record.number);
        while self.numbers.len() > settings.max() {
            let Some(oldest) = self.numbers.pop_front() else { break };
            out.push(Mutation { key: key(oldest), value: None });
        }
        self.trim_expired(settings, now_micros, out);
    }

    /// Whether a record is older than `settings`' age bound at `now_micros`.
    pub fn has_expired(&self, settings: &ChangelogSettings, now_micros: u64) -> bool {
        let Some(cutoff) = cutoff(settings, now_micros) else { return false };
        self.numbers.front().is_some_and(|&oldest| oldest < cutoff)
    }

    /// The deletes of every record older than the age bound.
    pub fn trim_expired(&mut self, settings: &ChangelogSettings, now_micros: u64, out: &mut Vec<Mutation>) {
        let Some(cutoff) = cutoff(settings, now_micros) else { return };
        while let Some(&oldest) = self.numbers.front() {
            if oldest >= cutoff {
                break;
            }
            self.numbers.pop_front();
            out.push(Mutation { key: key(oldest), value: None });
        }
    }
}

/// The oldest number the age bound keeps; None without an age bound.
fn cutoff(settings: &ChangelogSettings, now_micros: u64) -> Option<u64> {
    (settings.max_age_s() > 0)
        .then(|| now_micros.saturating_sub(settings.max_age_s().saturating_mul(1_000_000)))
}

/// The wall clock in microseconds (what a record's number is compared with for its age).
pub fn now_micros() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::EngineKind;
    use ferrodir_proto::entry::Attribute;

    fn record(number: u64) -> ChangeRecord {
        ChangeRecord {
            number,
            kind: ChangeKind::ModRdn,
            target_dn: format!("cn={number},dc=example,dc=com"),
            author: "cn=Manager,dc=example,dc=com".into(),
            changes: Vec::new(),
            new_rdn: "cn=new".into(),
            delete_old_rdn: true,
            new_superior: Some("ou=people,dc=example,dc=com".into()),
        }
    }

    #[test]
    fn changelog_records_round_trip_and_bad_ones_are_refused() {
        let r = record(42);
        assert_eq!(ChangeRecord::decode(&key(42), &r.encode()).unwrap(), r);
        let mut add = record(43);
        add.kind = ChangeKind::Add;
        add.new_superior = None;
        add.delete_old_rdn = false;
        add.changes = b"cn: x\n".to_vec();
        assert_eq!(ChangeRecord::decode(&key(43), &add.encode()).unwrap(), add);
        assert!(ChangeRecord::decode(&key(42), &r.encode()[..10]).is_err());
        assert!(ChangeRecord::decode(&[b'G', 1], &r.encode()).is_err());
        let mut bad_kind = r.encode();
        bad_kind[1] = 9;
        assert!(ChangeRecord::decode(&key(42), &bad_kind).is_err());
    }

    #[test]
    fn changes_are_written_as_ldif() {
        let entry = Entry::new(vec![
            Attribute::new("cn", vec![b"a".to_vec()]),
            Attribute::new("userPassword", vec![b"{SSHA}abc".to_vec()]),
        ]);
        assert_eq!(String::from_utf8(added_ldif(&entry)).unwrap(), "cn: a\nuserPassword: {SSHA}abc\n");
        let long = "x".repeat(200);
        let entry = Entry::new(vec![Attribute::new("description", vec![long.clone().into_bytes()])]);
        assert_eq!(String::from_utf8(added_ldif(&entry)).unwrap(), format!("description: {long}\n"));
        let mods = vec![
            LdifMod { op: ModOp::Replace, attr: Attribute::new("sn", vec![b"x".to_vec(), b"y".to_vec()]) },
            LdifMod { op: ModOp::Delete, attr: Attribute::new("description", vec![]) },
        ];
        assert_eq!(
            String::from_utf8(modified_ldif(&mods)).unwrap(),
            "replace: sn\nsn: x\nsn: y\n-\ndelete: description\n-\n"
        );
    }

    #[test]
    fn the_changelog_stays_bounded_by_count_and_age() {
        let dir = tempfile::tempdir().unwrap();
        let engine = EngineKind::Redb.open(dir.path(), 0, &Default::default()).unwrap();
        let settings = ChangelogSettings::new(3, 10, None);
        let mut log = Changelog::load(engine.snapshot().unwrap().as_ref()).unwrap();
        let now = 100_000_000;
        for n in [85_000_000u64, 95_000_000, 96_000_000, 97_000_000, 98_000_000] {
            let mut batch = Vec::new();
            log.record(&record(n), &settings, now, &mut batch);
            engine.commit(&batch).unwrap();
        }
        let snapshot = engine.snapshot().unwrap();
        let numbers = |upto: u64, max: usize| -> Vec<u64> {
            read(snapshot.as_ref(), 0, upto, max).unwrap().iter().map(|r| r.number).collect()
        };
        assert_eq!(numbers(u64::MAX, 10), [96_000_000, 97_000_000, 98_000_000]);
        assert_eq!(numbers(97_000_000, 10), [96_000_000, 97_000_000]);
        assert_eq!(numbers(u64::MAX, 1), [96_000_000]);
        assert_eq!(read(snapshot.as_ref(), 96_000_000, u64::MAX, 10).unwrap().len(), 2);
        // Ten seconds later the two oldest are past the age bound.
        assert!(log.has_expired(&settings, 107_000_000));
        let mut batch = Vec::new();
        log.trim_expired(&settings, 107_500_000, &mut batch);
        engine.commit(&batch).unwrap();
        assert_eq!(log.first(), 98_000_000);
        let again = Changelog::load(engine.snapshot().unwrap().as_ref()).unwrap();
        assert_eq!((again.len(), again.first(), again.committed_last()), (1, 98_000_000, 98_000_000));
    }
}
