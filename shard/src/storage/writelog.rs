//! A shard's write log: the durable half of a commit when `[limits] write_log_bytes` is on.
//!
//! A durable redb commit writes every page the batch copied (10-46 scattered 4 KiB pages
//! for a modify or an add) and then waits for fdatasync, whose time grows with the pages
//! it flushes (docs/BENCHMARKS.md, "Cheaper commits per write"). With the log, a commit
//! appends the batch's mutations as one record to this file, syncs that, and then applies
//! the batch to redb without durability; every so often a durable redb commit (a
//! checkpoint) makes redb's file whole on its own and the log starts over.
//!
//! The file is written in full (zeros) when it is created and never changes size, so a
//! sync flushes only the record's pages, never the file's metadata. Each record starts on a
//! 4 KiB boundary: appending never rewrites a page that holds an acknowledged record, so a
//! torn write can only damage the record being written, which was not acknowledged.
//!
//! Record, at a multiple of [`PAGE`]: magic "FDWL" (4 bytes), payload length (u32 LE),
//! sequence number (u64 LE), the log's id (u64 LE), CRC-32 of the sequence number, id,
//! length and payload (u32 LE), payload. The id is drawn when the shard file first gets a
//! log and kept in that file: a log left beside another shard file (a restore over an old
//! data directory, a file copied by hand) is never replayed into it.
//!
//! The payload is the batch: per mutation a tag (1 put, 0 delete), the key's length (u32
//! LE) and bytes, and for a put the value's length (u32 LE) and bytes. Or it cancels an
//! earlier record: tag 2 and that record's sequence number (u64 LE), written when redb
//! refused a batch after its record was synced, so that the write answered as failed is
//! not replayed.
//!
//! Sequence numbers grow by one per record for the life of the shard and are never reused.
//! Replay ([`WriteLog::records`]) reads records from the start of the file while each one
//! checks out and follows the one before, so it stops at the first torn record and at the
//! first record left over from before the last start-over (whose number is lower).
//! Mutations are whole values (a put carries the key's new value), so applying a run of
//! records that ends at the newest one to a state that already holds some of them gives
//! the same result as applying only the missing ones: replay needs no exact start.

use std::io;

use redb::StorageBackend;

use super::Mutation;

/// Records start on multiples of this.
pub const PAGE: u64 = 4096;
const MAGIC: &[u8; 4] = b"FDWL";
/// Magic, length, sequence number, id, CRC.
const HEADER: usize = 4 + 4 + 8 + 8 + 4;
const TAG_DELETE: u8 = 0;
const TAG_PUT: u8 = 1;
const TAG_CANCEL: u8 = 2;
/// Zeros written per call while the file is created.
const FILL_CHUNK: usize = 1 << 20;

/// The open log of one shard. Only the shard's commit thread appends to it.
pub struct WriteLog {
    file: Box<dyn StorageBackend>,
    /// The file's size, fixed at creation: a multiple of [`PAGE`].
    capacity: u64,
    /// Where the next record goes.
    tail: u64,
    /// The next record's sequence number.
    next_seq: u64,
    /// This log's id, in every record.
    id: u64,
    /// The batch's encoding, reused between appends.
    payload: Vec<u8>,
    /// The record being written (header, payload, padding), reused between appends: no
    /// allocation per commit.
    record: Vec<u8>,
}

/// What replay reads from a log ([`WriteLog::records`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// The records to apply, oldest first.
    pub records: Vec<Record>,
    /// The first and the newest number of the run read, cancelled and cancelling records
    /// included: the next record must be numbered above `newest`, and `first` shows whether
    /// the run follows what the shard file holds.
    pub first: Option<u64>,
    pub newest: Option<u64>,
}

/// One record read back by replay.
#[derive(Debug, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub mutations: Vec<Mutation>,
}

impl WriteLog {
    /// Opens a log on `file`, creating its content (zeros, synced) when the file is shorter
    /// than `capacity` rounded up to whole pages. Appends go at the start, are numbered
    /// from `next_seq` and carry `id`; replay first, with [`WriteLog::records`].
    pub fn open(file: Box<dyn StorageBackend>, capacity: u64, next_seq: u64, id: u64) -> io::Result<Self> {
        let capacity = capacity.div_ceil(PAGE).max(1) * PAGE;
        let len = file.len()?;
        if len < capacity {
            file.set_len(capacity)?;
            let zeros = vec![0u8; FILL_CHUNK];
            let mut at = 0;
            while at < capacity {
                let take = (capacity - at).min(FILL_CHUNK as u64) as usize;
                file.write(at, zeros.get(..take).unwrap_or(&zeros))?;
                at += take as u64;
            }
            file.sync_data()?;
        }
        // A file larger than asked (the setting was lowered) keeps its size: its tail is
        // simply never written again.
        let capacity = capacity.max(len - len % PAGE);
        Ok(Self { file, capacity, tail: 0, next_seq, id, payload: Vec::new(), record: Vec::new() })
    }

    /// Every record a replay must consider, oldest first: from the start of the file while
    /// each record checks out, carries this log's id and is numbered one above the one
    /// before; cancelled records and the cancelling ones left out.
    pub fn records(&self) -> io::Result<Replay> {
        let mut records: Vec<Record> = Vec::new();
        let mut cancelled: Vec<u64> = Vec::new();
        let mut at = 0;
        let mut header = [0u8; HEADER];
        while at + HEADER as u64 <= self.capacity {
            self.file.read(at, &mut header)?;
            let Some((seq, id, len)) = parse_header(&header) else { break };
            if id != self.id {
                break;
            }
            if records.last().is_some_and(|last| last.seq.checked_add(1) != Some(seq)) {
                break;
            }
            let end = at + HEADER as u64 + len as u64;
            if end > self.capacity {
                break;
            }
            let mut payload = vec![0u8; len as usize];
            self.file.read(at + HEADER as u64, &mut payload)?;
            if checksum(seq, id, len, &payload) != crc_of(&header) {
                break;
            }
            match payload.split_first() {
                Some((&TAG_CANCEL, rest)) => {
                    let Some(target) = rest.try_into().ok().map(u64::from_le_bytes) else { break };
                    cancelled.push(target);
                    // An empty stand-in, dropped below with the cancelled ones.
                    records.push(Record { seq, mutations: Vec::new() });
                    cancelled.push(seq);
                }
                _ => {
                    let Some(mutations) = decode(&payload) else { break };
                    records.push(Record { seq, mutations });
                }
            }
            at = end.div_ceil(PAGE) * PAGE;
        }
        let (first, newest) = (records.first().map(|r| r.seq), records.last().map(|r| r.seq));
        records.retain(|r| !cancelled.contains(&r.seq));
        Ok(Replay { records, first, newest })
    }

    /// Appends a record cancelling record `seq` (whose batch redb refused after it was
    /// synced here) and syncs it.
    pub fn cancel(&mut self, seq: u64) -> io::Result<()> {
        let mut payload = vec![TAG_CANCEL];
        payload.extend_from_slice(&seq.to_le_bytes());
        self.write_record(&payload).map(|_| ())
    }

    /// Whether a record of `batch` fits in the file at all (else the batch must go to redb
    /// durably by itself).
    pub fn can_hold(&self, batch: &[Mutation]) -> bool {
        round_up(HEADER as u64 + encoded_len(batch)) <= self.capacity
    }

    /// Whether a record of `batch` fits after the records already written since the last
    /// start-over, with a page to spare for a cancelling record.
    pub fn has_room(&self, batch: &[Mutation]) -> bool {
        self.tail + round_up(HEADER as u64 + encoded_len(batch)) + PAGE <= self.capacity
    }

    /// Appends `batch` as the next record and syncs it; returns its sequence number. The
    /// caller checked [`WriteLog::has_room`]. An error leaves the log unusable (the record
    /// may or may not be in the file): the shard takes no more writes.
    pub fn append(&mut self, batch: &[Mutation]) -> io::Result<u64> {
        let mut payload = std::mem::take(&mut self.payload);
        payload.clear();
        encode(batch, &mut payload);
        let result = self.write_record(&payload);
        self.payload = payload;
        result
    }

    /// Writes and syncs one record of `payload` at the tail; returns its number.
    fn write_record(&mut self, payload: &[u8]) -> io::Result<u64> {
        let seq = self.next_seq;
        let len = u32::try_from(payload.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a batch over 4 GiB"))?;
        let crc = checksum(seq, self.id, len, payload);
        let mut record = std::mem::take(&mut self.record);
        record.clear();
        record.extend_from_slice(MAGIC);
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&seq.to_le_bytes());
        record.extend_from_slice(&self.id.to_le_bytes());
        record.extend_from_slice(&crc.to_le_bytes());
        record.extend_from_slice(payload);
        // Pad to the page: the sync then writes whole pages of this record only.
        let padded = round_up(record.len() as u64);
        if self.tail + padded > self.capacity {
            self.record = record;
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "the record does not fit the write log"));
        }
        record.resize(padded as usize, 0);
        let written = self.file.write(self.tail, &record).and_then(|()| self.file.sync_data());
        self.record = record;
        written?;
        self.tail += padded;
        self.next_seq += 1;
        Ok(seq)
    }

    /// Starts over at the beginning of the file, after a checkpoint made every record so far
    /// durable in redb. Nothing is written: the next append overwrites the first record, and
    /// replay stops at the older ones because of their numbers.
    pub fn start_over(&mut self) {
        self.tail = 0;
    }

    /// Bytes written since the last start-over.
    pub fn used(&self) -> u64 {
        self.tail
    }

    /// The number the next record gets; every record before it has a lower one.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Numbers the next record `seq` (after a replay found newer records than redb holds).
    pub fn set_next_seq(&mut self, seq: u64) {
        self.next_seq = seq;
    }
}

fn round_up(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE) * PAGE
}

fn parse_header(header: &[u8; HEADER]) -> Option<(u64, u64, u32)> {
    if header.get(..4)? != MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(header.get(4..8)?.try_into().ok()?);
    let seq = u64::from_le_bytes(header.get(8..16)?.try_into().ok()?);
    let id = u64::from_le_bytes(header.get(16..24)?.try_into().ok()?);
    Some((seq, id, len))
}

fn crc_of(header: &[u8; HEADER]) -> u32 {
    header.get(24..28).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes).unwrap_or(0)
}

fn checksum(seq: u64, id: u64, len: u32, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&seq.to_le_bytes());
    hasher.update(&id.to_le_bytes());
    hasher.update(&len.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

fn encoded_len(batch: &[Mutation]) -> u64 {
    batch
        .iter()
        .map(|m| 1 + 4 + m.key.len() as u64 + m.value.as_ref().map_or(0, |v| 4 + v.len() as u64))
        .sum()
}

fn encode(batch: &[Mutation], out: &mut Vec<u8>) {
    for m in batch {
        match &m.value {
            Some(value) => {
                out.push(TAG_PUT);
                out.extend_from_slice(&(m.key.len() as u32).to_le_bytes());
                out.extend_from_slice(&m.key);
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(value);
            }
            None => {
                out.push(TAG_DELETE);
                out.extend_from_slice(&(m.key.len() as u32).to_le_bytes());
                out.extend_from_slice(&m.key);
            }
        }
    }
}

/// The mutations of a payload; None if it does not parse (only a checksum collision gets
/// here with a damaged payload).
fn decode(mut payload: &[u8]) -> Option<Vec<Mutation>> {
    fn bytes<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
        let len = u32::from_le_bytes(input.get(..4)?.try_into().ok()?) as usize;
        let out = input.get(4..4 + len)?;
        *input = input.get(4 + len..)?;
        Some(out)
    }
    let mut mutations = Vec::new();
    while let Some((&tag, rest)) = payload.split_first() {
        payload = rest;
        let key = bytes(&mut payload)?.to_vec();
        let value = match tag {
            TAG_PUT => Some(bytes(&mut payload)?.to_vec()),
            TAG_DELETE => None,
            _ => return None,
        };
        mutations.push(Mutation { key, value });
    }
    Some(mutations)
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;

    use redb::backends::FileBackend;

    use super::*;

    fn put(key: &str, value: &str) -> Mutation {
        Mutation { key: key.as_bytes().to_vec(), value: Some(value.as_bytes().to_vec()) }
    }

    fn delete(key: &str) -> Mutation {
        Mutation { key: key.as_bytes().to_vec(), value: None }
    }

    fn backend(path: &std::path::Path) -> Box<dyn StorageBackend> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).unwrap();
        Box::new(FileBackend::new(file).unwrap())
    }

    #[test]
    fn records_read_back_in_order_with_deletes_and_empty_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shard-000.wal");
        let mut log = WriteLog::open(backend(&path), 64 * 1024, 7, 42).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 * 1024, "the file is written in full");
        let first = vec![put("Ea", "1"), delete("Eb"), put("Ec", "")];
        let big = vec![put("Ed", &"x".repeat(9000))];
        assert_eq!(log.append(&first).unwrap(), 7);
        assert_eq!(log.append(&big).unwrap(), 8);
        assert_eq!(log.used(), PAGE + 3 * PAGE, "each record starts on a page");
        drop(log);
        let reopened = WriteLog::open(backend(&path), 64 * 1024, 0, 42).unwrap();
        let records = reopened.records().unwrap().records;
        assert_eq!(records, vec![Record { seq: 7, mutations: first }, Record { seq: 8, mutations: big }]);
    }

    /// After a start-over the next record overwrites the first; replay stops at the older
    /// records behind it, and at a record whose bytes are damaged.
    #[test]
    fn replay_stops_at_older_and_damaged_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let mut log = WriteLog::open(backend(&path), 16 * PAGE, 1, 42).unwrap();
        for i in 0..5 {
            log.append(&[put(&format!("E{i}"), "old")]).unwrap();
        }
        log.start_over();
        log.append(&[put("E9", "new")]).unwrap();
        let records = log.records().unwrap().records;
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].seq, 6);
        log.append(&[put("E10", "new")]).unwrap();
        log.append(&[put("E11", "new")]).unwrap();
        assert_eq!(log.records().unwrap().records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![6, 7, 8]);
        drop(log);
        // Damage the third record's payload: replay keeps the two before it.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[2 * PAGE as usize + HEADER + 3] ^= 0x55;
        std::fs::write(&path, &bytes).unwrap();
        let log = WriteLog::open(backend(&path), 16 * PAGE, 0, 42).unwrap();
        assert_eq!(log.records().unwrap().records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![6, 7]);
    }

    #[test]
    fn room_and_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = WriteLog::open(backend(&dir.path().join("l")), 4 * PAGE, 1, 42).unwrap();
        let page_sized = vec![put("E", &"v".repeat(PAGE as usize))];
        assert!(log.can_hold(&page_sized) && log.has_room(&page_sized));
        log.append(&page_sized).unwrap();
        assert!(!log.has_room(&page_sized), "two pages used, two more and a spare needed");
        log.append(&page_sized).unwrap();
        assert!(log.append(&page_sized).is_err(), "past the end");
        let too_big = vec![put("E", &"v".repeat(4 * PAGE as usize))];
        assert!(!log.can_hold(&too_big));
        log.start_over();
        assert!(log.has_room(&page_sized));
    }

    /// A cancelled record is not replayed; the records around it are.
    #[test]
    fn cancelled_records_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let mut log = WriteLog::open(backend(&path), 8 * PAGE, 1, 42).unwrap();
        log.append(&[put("Ea", "1")]).unwrap();
        let refused = log.append(&[put("Eb", "2")]).unwrap();
        log.cancel(refused).unwrap();
        log.append(&[put("Ec", "3")]).unwrap();
        let records = log.records().unwrap().records;
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 4]);
        assert_eq!(records[1].mutations, vec![put("Ec", "3")]);
        let replay = log.records().unwrap();
        assert_eq!((replay.first, replay.newest), (Some(1), Some(4)));
        // A cancel that ends the run still counts for the next number.
        log.cancel(4).unwrap();
        let replay = log.records().unwrap();
        assert_eq!(replay.records.len(), 1);
        assert_eq!(replay.newest, Some(5));
    }

    /// A log with another id (one left beside a different shard file) replays nothing.
    #[test]
    fn records_of_another_log_are_not_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let mut log = WriteLog::open(backend(&path), 4 * PAGE, 1, 42).unwrap();
        log.append(&[put("Ea", "1")]).unwrap();
        drop(log);
        let other = WriteLog::open(backend(&path), 4 * PAGE, 1, 43).unwrap();
        assert!(other.records().unwrap().records.is_empty());
    }

    #[test]
    fn a_fresh_or_zeroed_file_has_no_records() {
        let dir = tempfile::tempdir().unwrap();
        let log = WriteLog::open(backend(&dir.path().join("l")), 10, 1, 42).unwrap();
        assert_eq!(log.capacity, PAGE);
        assert!(log.records().unwrap().records.is_empty());
    }
}
