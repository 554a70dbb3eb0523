//! Pages a redb backend keeps in process memory over its file: the power-cut test backend
//! (`powercut`, until the next sync) and the read-only reopen after a failed commit
//! (`frozen`, for good). Both see the file as redb left it plus redb's later writes.

use std::collections::BTreeMap;
use std::io;

use redb::backends::FileBackend;
use redb::StorageBackend;

pub(super) const PAGE_BYTES: u64 = 4096;

/// Writes not (yet) in the file, page by page.
#[derive(Debug)]
pub(super) struct PageOverlay {
    /// The length redb sees; the file's own length changes only in [`PageOverlay::flush`].
    pub len: u64,
    /// Page number → the page's current content (always `PAGE_BYTES` long).
    pages: BTreeMap<u64, Vec<u8>>,
    /// The file's bytes from here on read as zeros: redb shrank the storage below them.
    zero_from: u64,
}

impl PageOverlay {
    /// An empty overlay over a file of `len` bytes.
    pub fn new(len: u64) -> Self {
        Self { len, pages: BTreeMap::new(), zero_from: len }
    }

    /// Page `page` as the file holds it: zeros past its end and past `zero_from`.
    fn file_page(&self, file: &FileBackend, page: u64) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; PAGE_BYTES as usize];
        let readable = file.len()?.min(self.zero_from);
        let start = page * PAGE_BYTES;
        if start < readable {
            let end = (start + PAGE_BYTES).min(readable);
            file.read(start, span_mut(&mut out, 0, (end - start) as usize)?)?;
        }
        Ok(out)
    }

    pub fn read(&self, file: &FileBackend, offset: u64, out: &mut [u8]) -> io::Result<()> {
        if offset + out.len() as u64 > self.len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"));
        }
        for (page, in_page, take, at) in page_spans(offset, out.len()) {
            let dst = span_mut(out, at, take)?;
            match self.pages.get(&page) {
                Some(bytes) => dst.copy_from_slice(span(bytes, in_page, take)?),
                None => dst.copy_from_slice(span(&self.file_page(file, page)?, in_page, take)?),
            }
        }
        Ok(())
    }

    pub fn write(&mut self, file: &FileBackend, offset: u64, data: &[u8]) -> io::Result<()> {
        if offset + data.len() as u64 > self.len {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "write past the end"));
        }
        for (page, in_page, take, at) in page_spans(offset, data.len()) {
            if !self.pages.contains_key(&page) {
                let bytes = self.file_page(file, page)?;
                self.pages.insert(page, bytes);
            }
            if let Some(bytes) = self.pages.get_mut(&page) {
                span_mut(bytes, in_page, take)?.copy_from_slice(span(data, at, take)?);
            }
        }
        Ok(())
    }

    pub fn set_len(&mut self, len: u64) {
        if len < self.len {
            // Bytes past the new end must read as zeros if the storage grows again.
            self.pages.split_off(&len.div_ceil(PAGE_BYTES));
            if let Some(bytes) = self.pages.get_mut(&(len / PAGE_BYTES)) {
                if let Some(tail) = bytes.get_mut((len % PAGE_BYTES) as usize..) {
                    tail.fill(0);
                }
            }
            self.zero_from = self.zero_from.min(len);
        }
        self.len = len;
    }

    /// Writes every page into `file` (its stale bytes past a shrink become zeros, its length
    /// becomes `len`) and empties the overlay. The caller syncs the file.
    pub fn flush(&mut self, file: &FileBackend) -> io::Result<()> {
        let len = self.len;
        let file_len = file.len()?;
        let keep = file_len.min(self.zero_from).min(len);
        if keep < file_len {
            file.set_len(keep)?;
        }
        if len > keep {
            file.set_len(len)?;
        }
        for (&page, bytes) in &self.pages {
            let start = page * PAGE_BYTES;
            if start < len {
                file.write(start, span(bytes, 0, (len - start).min(PAGE_BYTES) as usize)?)?;
            }
        }
        self.pages.clear();
        self.zero_from = len;
        Ok(())
    }
}

/// Splits `offset..offset + len` into (page, offset in page, bytes, offset in the buffer).
pub(super) fn page_spans(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let end = offset + len as u64;
    let mut pos = offset;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let take = (PAGE_BYTES - pos % PAGE_BYTES).min(end - pos);
        let span = (pos / PAGE_BYTES, (pos % PAGE_BYTES) as usize, take as usize, (pos - offset) as usize);
        pos += take;
        Some(span)
    })
}

/// `bytes[start..start + len]`, or an error naming the range: page spans are computed to fit,
/// so this never fails unless that arithmetic is wrong.
fn span(bytes: &[u8], start: usize, len: usize) -> io::Result<&[u8]> {
    start.checked_add(len).and_then(|end| bytes.get(start..end)).ok_or_else(|| out_of_page(start, len))
}

fn span_mut(bytes: &mut [u8], start: usize, len: usize) -> io::Result<&mut [u8]> {
    start.checked_add(len).and_then(|end| bytes.get_mut(start..end)).ok_or_else(|| out_of_page(start, len))
}

fn out_of_page(start: usize, len: usize) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("span {start}+{len} outside its page"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_spans_cover_the_range() {
        let spans: Vec<_> = page_spans(4090, 10).collect();
        assert_eq!(spans, vec![(0, 4090, 6, 0), (1, 0, 4, 6)]);
    }
}
