//! Just enough BER (X.690) for an LDAP client: definite lengths, one-byte tags (every tag
//! RFC 4511 uses is below 31), and the few universal types LDAP needs. Our own code rather
//! than ldap3's, so that the test controls every byte it sends: value order inside a
//! modification, raw filters ldap3's parser refuses, controls, odd bind versions.

/// Universal tags.
pub const BOOLEAN: u8 = 0x01;
pub const INTEGER: u8 = 0x02;
pub const OCTET_STRING: u8 = 0x04;
pub const ENUMERATED: u8 = 0x0a;
pub const SEQUENCE: u8 = 0x30;
pub const SET: u8 = 0x31;

/// Encodes one TLV.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = (len as u32).to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (4 - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// A constructed TLV whose content is the concatenation of already encoded `parts`.
pub fn constructed(tag: u8, parts: &[Vec<u8>]) -> Vec<u8> {
    tlv(tag, &parts.concat())
}

pub fn octets(value: impl AsRef<[u8]>) -> Vec<u8> {
    tlv(OCTET_STRING, value.as_ref())
}

/// INTEGER or ENUMERATED (or a context tag carrying one), minimal two's complement.
pub fn integer_tagged(tag: u8, value: i64) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let mut start = 0;
    while start < 7 {
        let redundant = (bytes[start] == 0x00 && bytes[start + 1] & 0x80 == 0)
            || (bytes[start] == 0xff && bytes[start + 1] & 0x80 != 0);
        if !redundant {
            break;
        }
        start += 1;
    }
    tlv(tag, &bytes[start..])
}

pub fn integer(value: i64) -> Vec<u8> {
    integer_tagged(INTEGER, value)
}

pub fn enumerated(value: i64) -> Vec<u8> {
    integer_tagged(ENUMERATED, value)
}

pub fn boolean_tagged(tag: u8, value: bool) -> Vec<u8> {
    tlv(tag, &[if value { 0xff } else { 0x00 }])
}

/// One decoded TLV, borrowing its content.
#[derive(Debug, Clone, Copy)]
pub struct Tlv<'a> {
    pub tag: u8,
    pub content: &'a [u8],
}

/// The total size of the first TLV in `buf` once its header is complete, or `None` while
/// more bytes are needed. Errors on indefinite or absurd lengths.
pub fn frame_size(buf: &[u8]) -> Result<Option<usize>, String> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let first = buf[1];
    if first < 0x80 {
        return Ok(Some(2 + first as usize));
    }
    let count = (first & 0x7f) as usize;
    if count == 0 || count > 4 {
        return Err(format!("unsupported BER length form 0x{first:02x}"));
    }
    if buf.len() < 2 + count {
        return Ok(None);
    }
    let len = buf[2..2 + count].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
    Ok(Some(2 + count + len))
}

/// Splits the first TLV off `buf`.
pub fn parse(buf: &[u8]) -> Result<(Tlv<'_>, &[u8]), String> {
    let size = frame_size(buf)?.ok_or("truncated BER header")?;
    if size > buf.len() {
        return Err(format!("truncated BER value: need {size} bytes, have {}", buf.len()));
    }
    let header = if buf[1] < 0x80 { 2 } else { 2 + (buf[1] & 0x7f) as usize };
    Ok((Tlv { tag: buf[0], content: &buf[header..size] }, &buf[size..]))
}

/// Every TLV inside a constructed value.
pub fn children(content: &[u8]) -> Result<Vec<Tlv<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = content;
    while !rest.is_empty() {
        let (item, tail) = parse(rest)?;
        out.push(item);
        rest = tail;
    }
    Ok(out)
}

/// Two's complement big-endian content of an INTEGER or ENUMERATED.
pub fn parse_integer(content: &[u8]) -> Result<i64, String> {
    if content.is_empty() || content.len() > 8 {
        return Err(format!("bad INTEGER length {}", content.len()));
    }
    let negative = content[0] & 0x80 != 0;
    let start: i64 = if negative { -1 } else { 0 };
    Ok(content.iter().fold(start, |acc, b| (acc << 8) | *b as i64))
}

pub fn string(content: &[u8]) -> String {
    String::from_utf8_lossy(content).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_round_trip() {
        for value in [0i64, 1, 127, 128, 255, 256, -1, -128, -129, 65535, i32::MAX as i64] {
            let encoded = integer(value);
            let (tlv, rest) = parse(&encoded).unwrap();
            assert!(rest.is_empty());
            assert_eq!(parse_integer(tlv.content).unwrap(), value, "{encoded:02x?}");
        }
        assert_eq!(integer(128), vec![0x02, 0x02, 0x00, 0x80]);
        assert_eq!(integer(-1), vec![0x02, 0x01, 0xff]);
    }

    #[test]
    fn long_lengths() {
        let content = vec![7u8; 300];
        let encoded = octets(&content);
        assert_eq!(&encoded[..4], &[0x04, 0x82, 0x01, 0x2c]);
        assert_eq!(frame_size(&encoded[..3]).unwrap(), None);
        assert_eq!(frame_size(&encoded).unwrap(), Some(304));
        assert_eq!(parse(&encoded).unwrap().0.content, &content[..]);
    }
}
