//! RFC 4514 §2.4 escaping of attribute values in a DN string: what a DN prints and what a
//! normalised DN is made of. A leaf: both the DN printer (`dn`) and the AVA normalisers
//! (`value`, `schema::dn_rules`) write values through it, so they escape alike.

use std::fmt;

/// Appends `value` escaped as [`write_escaped_value`] does; a value with nothing to escape
/// (printable ASCII without the special characters, no space or `#` where they'd need one)
/// is copied as it is.
pub(crate) fn push_escaped_value(out: &mut String, value: &[u8]) {
    let plain = value.iter().all(|&b| (0x20..0x7f).contains(&b) && !b",+\"\\<>;".contains(&b))
        && value.first().is_none_or(|&b| b != b' ' && b != b'#')
        && value.last().is_none_or(|&b| b != b' ');
    match std::str::from_utf8(value) {
        Ok(text) if plain => out.push_str(text),
        // Writing into a String cannot fail.
        _ => {
            let _ = write_escaped_value(out, value);
        }
    }
}

/// Writes `value` escaped as RFC 4514 §2.4 requires: `"+,;<>\` always, a leading `#` or space,
/// a trailing space, and NUL as `\00`. Other control characters are written as `\XX` too (the
/// RFC allows escaping any character) so a DN stays on one line in logs and LDIF. Bytes that
/// are not UTF-8 can only be written as `\XX`.
pub(crate) fn write_escaped_value(out: &mut impl fmt::Write, value: &[u8]) -> fmt::Result {
    let mut index = 0;
    for chunk in value.utf8_chunks() {
        for ch in chunk.valid().chars() {
            let at_start = index == 0;
            index += ch.len_utf8();
            let at_end = index == value.len();
            match ch {
                ',' | '+' | '"' | '\\' | '<' | '>' | ';' => {
                    out.write_char('\\')?;
                    out.write_char(ch)?;
                }
                ' ' if at_start || at_end => out.write_str("\\ ")?,
                '#' if at_start => out.write_str("\\#")?,
                c if c.is_ascii_control() => write!(out, "\\{:02X}", c as u32)?,
                c => out.write_char(c)?,
            }
        }
        for byte in chunk.invalid() {
            index += 1;
            write!(out, "\\{byte:02X}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_escape_path_writes_what_the_general_one_does() {
        let values: [&[u8]; 14] = [
            b"",
            b"plain",
            b"with space",
            b" lead",
            b"trail ",
            b"#hash",
            b"in#side",
            b"a,b+c;d",
            b"q\"uote\\",
            b"<tag>",
            b"ctl\x01x",
            b"del\x7f",
            "caf\u{e9}".as_bytes(),
            b"bad\xff",
        ];
        for value in values {
            let mut general = String::new();
            write_escaped_value(&mut general, value).unwrap();
            let mut fast = String::new();
            push_escaped_value(&mut fast, value);
            assert_eq!(fast, general, "{value:?}");
        }
    }
}
