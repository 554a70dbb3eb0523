//! A small length-prefixed binary codec for records and keys. Every read is bounds-checked:
//! the bytes come from disk, which can be corrupt.

#[derive(Debug, Clone, thiserror::Error)]
#[error("corrupt record: {0}")]
pub struct CorruptRecord(pub &'static str);

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A cursor over an encoded record.
pub struct ByteReader<'a> {
    buf: &'a [u8],
}

impl<'a> ByteReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    pub fn u8(&mut self) -> Result<u8, CorruptRecord> {
        let (&first, rest) = self.buf.split_first().ok_or(CorruptRecord("truncated u8"))?;
        self.buf = rest;
        Ok(first)
    }

    pub fn u64(&mut self) -> Result<u64, CorruptRecord> {
        let bytes = self.take(8)?;
        let array: [u8; 8] = bytes.try_into().map_err(|_| CorruptRecord("u64"))?;
        Ok(u64::from_be_bytes(array))
    }

    pub fn varint(&mut self) -> Result<u64, CorruptRecord> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(CorruptRecord("varint too long"))
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], CorruptRecord> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| CorruptRecord("length"))?;
        self.take(len)
    }

    pub fn string(&mut self) -> Result<String, CorruptRecord> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| CorruptRecord("utf-8"))
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], CorruptRecord> {
        if self.buf.len() < len {
            return Err(CorruptRecord("truncated"));
        }
        let (head, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(head)
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_truncation() {
        let mut out = Vec::new();
        for v in [0u64, 127, 128, 300, u64::MAX] {
            put_varint(&mut out, v);
        }
        let mut r = ByteReader::new(&out);
        for v in [0u64, 127, 128, 300, u64::MAX] {
            assert_eq!(r.varint().unwrap(), v);
        }
        assert!(ByteReader::new(&[0x80]).varint().is_err());
        assert!(ByteReader::new(&[5, b'a']).bytes().is_err());
    }
}
